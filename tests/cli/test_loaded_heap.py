"""The agent serves, and the replayer sends, with what they loaded at start-up frozen out of the
cyclic collector (dartfl/loaded_heap.py): a full collection over a loaded agent's ~400,000
objects stopped it for 170-215 ms, and a 100 ms SLO refused a second of traffic behind it."""

from __future__ import annotations

import gc
import signal
import weakref
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.cli import replay_cmd
from dartfl.cli.main import main
from dartfl.loaded_heap import loaded_heap_frozen
from dartfl.profiles import get_profile
from edge_client.agent import Agent


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _in_oldest_generation(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects(generation=2))


def test_what_was_alive_is_frozen_inside_the_block_and_thawed_after() -> None:
    loaded = [object()]  # tracked by the collector
    gc.collect()
    assert _in_oldest_generation(loaded)
    with loaded_heap_frozen():
        assert gc.get_freeze_count() > 0
        assert not _in_oldest_generation(loaded)  # no collection walks it
        gc.collect()
        assert not _in_oldest_generation(loaded)
    assert gc.get_freeze_count() == 0
    assert _in_oldest_generation(loaded)


def test_garbage_made_while_frozen_is_still_collected() -> None:
    with loaded_heap_frozen():
        ref = weakref.ref(_Cycle())
        gc.collect()
        assert ref() is None


def test_start_up_garbage_is_collected_not_frozen() -> None:
    ref = weakref.ref(_Cycle())
    with loaded_heap_frozen():
        assert ref() is None


def test_edge_run_serves_with_its_start_up_heap_frozen(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    frozen_while = {}

    class Served:
        def to_json(self) -> dict[str, Any]:
            return {}

    class StandIn:
        def start(self) -> str:
            frozen_while["start"] = gc.get_freeze_count()
            return "mqtt://127.0.0.1:9"

        def request_stop(self) -> None:
            pass

        def run(self) -> Served:
            frozen_while["run"] = gc.get_freeze_count()
            return Served()

    monkeypatch.setattr(Agent, "create", lambda *_args: StandIn())
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        assert main(["edge", "run", "--broker", "mqtt://127.0.0.1:9"]) == 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert frozen_while["start"] == 0  # start-up still collects what it throws away
    assert frozen_while["run"] > 0
    assert gc.get_freeze_count() == 0
    capsys.readouterr()


def test_a_replay_sends_with_its_start_up_heap_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestration.replay

    frozen_while = []
    outcome = SimpleNamespace(record="the record")

    def replay(*_args: Any) -> SimpleNamespace:
        frozen_while.append(gc.get_freeze_count())
        return outcome

    monkeypatch.setattr(orchestration.replay, "replay", replay)
    arrivals = Arrivals(np.array([0.1]), np.array([0]), ("uci-digits",), 1.0)
    args: Any = SimpleNamespace(slo_ms=100.0, payload="json", settle_s=1.0, device="edge-1", policy="dart")
    sighting: Any = SimpleNamespace(status=None)
    done = replay_cmd._run_replay(args, "mqtt://127.0.0.1:9", sighting, get_profile("pi4"), arrivals, None)
    assert done.outcome is outcome
    assert frozen_while and frozen_while[0] > 0
    assert gc.get_freeze_count() == 0
