"""Lane CPUs and pinning a lane's thread (edge_client/core_pinning.py)."""

from __future__ import annotations

import os
import threading

import pytest

from dartfl.errors import ConfigError
from edge_client.core_pinning import available_cpus, lane_cpus, pin_current_thread


def test_the_first_k_cpus_serve_and_the_rest_train() -> None:
    assert lane_cpus(1, (0, 1, 2, 3)) == ((0,), (1, 2, 3))
    assert lane_cpus(4, (0, 1, 2, 3)) == ((0, 1, 2, 3), ())
    with pytest.raises(ConfigError, match=r"inference cores must lie in 1\.\.4"):
        lane_cpus(0, (0, 1, 2, 3))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no thread affinity on this OS")
def test_pinning_moves_the_calling_thread_only() -> None:
    cpus = available_cpus()
    seen: dict[str, object] = {}

    def lane() -> None:
        seen["result"] = pin_current_thread(cpus[:1])
        seen["mask"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=lane)
    thread.start()
    thread.join()
    result = seen["result"]
    assert getattr(result, "pinned", False), getattr(result, "reason", "")
    assert seen["mask"] == {cpus[0]}
    assert os.sched_getaffinity(0) == set(cpus)  # this thread keeps every CPU


def test_pinning_to_no_cpu_is_refused_with_a_reason() -> None:
    result = pin_current_thread(())
    assert not result.pinned and result.reason
