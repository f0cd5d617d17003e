"""The executor's share rule (shared by the simulator and the agent)."""

from __future__ import annotations

import math

from dartfl.executor import ShareGate, most_urgent


def test_strict_priority_serves_whenever_requests_wait() -> None:
    gate = ShareGate()
    assert gate.should_serve(3, 1.0, training_open=True)
    assert not gate.should_serve(0, 1.0, training_open=True)


def test_no_training_work_means_inference_gets_everything() -> None:
    assert ShareGate().should_serve(1, 0.0, training_open=False)


def test_a_step_earns_inference_its_share_of_time() -> None:
    gate = ShareGate()
    assert not gate.should_serve(5, 0.75, training_open=True)  # no credit yet: train first
    gate.trained(0.1, 0.75)  # earns 0.1 * 0.75 / 0.25 = 0.3 s of inference
    assert math.isclose(gate.credit_s, 0.3)
    assert gate.should_serve(5, 0.75, training_open=True)
    gate.served(0.2)
    assert gate.should_serve(5, 0.75, training_open=True)
    gate.served(0.2)
    assert not gate.should_serve(5, 0.75, training_open=True)  # credit spent: train again


def test_idle_inference_time_is_not_banked() -> None:
    gate = ShareGate()
    gate.trained(1.0, 0.5)
    gate.should_serve(0, 0.5, training_open=True)  # the queue ran dry
    assert gate.credit_s == 0.0


def test_most_urgent_is_the_earliest_deadline() -> None:
    assert most_urgent([math.inf, 2.0, 1.5]) == 2
    assert most_urgent([math.inf, math.inf]) == -1
