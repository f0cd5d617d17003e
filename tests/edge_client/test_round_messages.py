"""The round channel's two messages: each field survives its codec, and a bad one is named."""

from __future__ import annotations

import pytest

from dartfl.errors import ConfigError, ProtocolError
from edge_client.agent_rounds import round_job
from edge_client.round_messages import RoundOrder, RoundResult

ORDER = RoundOrder(
    server_round=3,
    deadline_s=1.5,
    target_samples=200,
    tasks=("digits", "fashion"),
    policy="dart",
    loss_weighting="demand",
    learning_rate=0.03,
    step_samples=16,
)


def test_an_order_and_a_result_round_trip_through_their_json() -> None:
    assert RoundOrder.from_json(ORDER.to_json()) == ORDER
    # The wire keys are the run config's spelling, unchanged from the untyped channel.
    assert ORDER.to_json()["round-deadline-s"] == 1.5 and ORDER.to_json()["tasks"] == ["digits", "fashion"]
    assert RoundOrder.from_json({}) == RoundOrder()  # nothing said: the agent's own settings
    result = RoundResult("pi-1", {"digits": 40, "fashion": 0}, {"num-examples": 40.0})
    assert RoundResult.from_json(result.to_json()) == result


@pytest.mark.parametrize(
    ("meta", "problem"),
    [
        ({"round-deadline-s": "soon"}, "bad round metadata"),
        ({"round-target-samples": [1]}, "bad round metadata"),
        ({"round-deadline-s": 0}, "round-deadline-s must be > 0"),
        ({"round-deadline-s": float("nan")}, "round-deadline-s must be > 0"),
        ({"learning-rate": -1}, "learning-rate must be a number > 0"),
        ({"learning-rate": "0.1"}, "learning-rate must be a number > 0"),
        ({"step-samples": 0}, "step-samples must be an integer >= 1"),
        ({"step-samples": True}, "step-samples must be an integer >= 1"),
        ({"tasks": 3}, "tasks must be a list of task names"),
        ({"tasks": "digits"}, "tasks must be a list of task names"),
        ({"tasks": ["digits", 7]}, "tasks must be a list of task names"),
        ({"policy": 5}, "policy must be a string"),
        ({"loss-weighting": ["demand"]}, "loss-weighting must be a string"),
        # Each would pass here and fail later, mid-round: a negative target in every
        # telemetry snapshot, a deadline no wait can time (OverflowError).
        ({"round-target-samples": -5}, "round-target-samples must be an integer >= 0"),
        ({"round-target-samples": 2**53}, "round-target-samples must be an integer >= 0 and < 2"),
        ({"round-target-samples": 7.5}, "round-target-samples must be an integer"),
        ({"round-deadline-s": 1e300}, r"round-deadline-s must be > 0 and <= 86400 s, got 1e\+300"),
        ({"round-deadline-s": True}, "round-deadline-s must be > 0"),
        ({"learning-rate": 10**400}, "learning-rate must be a number > 0"),
        ({"server-round": 2.0}, "server-round must be an integer >= 0"),
        ({"tasks": ["digits"] * 65}, "tasks must be a list of task names"),
        ({"policy": "x" * 257}, "policy must be a string"),
    ],
)
def test_a_bad_order_field_is_refused_by_name(meta: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        RoundOrder.from_json(meta)


def test_an_order_at_its_limits_is_accepted() -> None:
    order = RoundOrder.from_json(
        {"round-deadline-s": 86400, "round-target-samples": 2**53 - 1, "server-round": 0}
    )
    assert order.deadline_s == 86400.0 and order.target_samples == 2**53 - 1 and order.server_round == 0


def test_a_result_without_counts_is_a_bad_reply() -> None:
    with pytest.raises(ProtocolError, match="lacks samples or metrics"):
        RoundResult.from_json({"device": "pi-1", "samples": {}})
    with pytest.raises(ProtocolError, match="not a number"):
        RoundResult.from_json({"samples": {"digits": "many"}, "metrics": {}})


def test_the_agent_runs_an_order_of_its_own_tasks_and_policy_only() -> None:
    job = round_job(ORDER, {}, 60.0, ("digits", "fashion"), policy="dart", loss_weighting="demand")
    assert job.duration_s == 1.5 and job.order is ORDER
    assert round_job(RoundOrder(), {}, 60.0, ("digits",)).duration_s == 60.0  # the agent's round length
    with pytest.raises(ConfigError, match="tasks"):
        round_job(ORDER, {}, 60.0, ("digits",))
    with pytest.raises(ConfigError, match=r"policy 'dart' differs .* --policy dart"):
        round_job(ORDER, {}, 60.0, ("digits", "fashion"), policy="inference-only")
