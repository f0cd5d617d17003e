"""`dartfl edge profile --cores N` measures a valid core model on the real model."""

from __future__ import annotations

from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from edge_client import core_profile
from edge_client.agent_config import AgentConfig
from edge_client.core_pinning import available_cpus
from edge_client.core_profile import measure_core_model
from edge_client.runtime import ModelRuntime


@pytest.mark.skipif(len(available_cpus()) < 2, reason="needs two CPUs")
def test_a_two_core_model_is_measured_and_the_runtime_is_left_as_it_was(tmp_path: Path) -> None:
    runtime = ModelRuntime.build(AgentConfig(max_train_per_task=200, width=0.5), tmp_path)
    try:
        model = measure_core_model(runtime, 2, quick=True)
        assert model.count == 2 and model.can_split
        assert model.inference_speedup[0] == 1.0 and model.inference_speedup[1] > 0.0
        assert model.training_speedup[0] == 1.0 and model.training_speedup[1] > 0.0
        assert model.inference_interference >= 0.0 and model.training_interference >= 0.0
        assert model.switch_s > 0.0  # a first build of two-thread sessions
        assert runtime.engine.threads == 1  # serving as before the measurement
        with pytest.raises(ConfigError, match="--cores must lie in 2"):
            measure_core_model(runtime, len(available_cpus()) + 1)
    finally:
        runtime.close()


def test_a_speedup_no_profile_may_hold_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen in CI: a 2-thread training step measured 115x slower than on one core while other
    # jobs held the CPUs, and `edge profile` wrote a file that it then refused to load.
    measured = iter([11.5, 0.06])  # one core took 0.1 s: 0.0087x, then 1.67x
    monkeypatch.setattr(core_profile, "_median_s", lambda work, reps: next(measured))
    assert core_profile._median_on(2, lambda: None, 5, 0.1, "a training step") == 0.06


def test_a_speedup_that_stays_implausible_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core_profile, "_median_s", lambda work, reps: 11.5)
    with pytest.raises(
        ConfigError, match=r"a training step on 2 cores took 115x .* rerun `dartfl edge profile`"
    ):
        core_profile._median_on(2, lambda: None, 5, 0.1, "a training step")
