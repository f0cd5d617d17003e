"""The ClientApp called in-process (simulation mode), and its configuration."""

from __future__ import annotations

import re

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from dartfl.errors import ConfigError
from edge_client.client_app import app
from edge_client.fl_sim_client import client_arrivals, fleet_demand
from fltask.config import FlConfig
from fltask.model import build_model, get_weights
from fltask.records import arrays_to_weights, weights_to_arrays

CFG = FlConfig(max_train_per_task=300, max_test_per_task=50, round_deadline_s=3.0, favourite_tasks="fashion")


def _message(server_round: int = 1) -> Message:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    model = build_model({"digits": 10, "fashion": 10, "uci-digits": 10}, 1.0, seed=CFG.seed)
    config = ConfigRecord({**CFG.to_run_config(), "server-round": server_round})
    content = RecordDict({"arrays": weights_to_arrays(get_weights(model)), "config": config})
    return Message(content, dst_node_id=5, message_type=MessageType.TRAIN)


def _context(node_config: dict[str, int | str] | None = None) -> Context:
    node = {"partition-id": 0, "num-partitions": 2} if node_config is None else node_config
    return Context(run_id=1, node_id=5, node_config=node, state=RecordDict(), run_config=CFG.to_run_config())


def test_a_simulated_round_trains_for_real_and_reports_per_task_samples() -> None:
    msg, ctx = _message(), _context()
    reply = app(msg, ctx)
    metrics = reply.content["metrics"]
    counts = {t: int(metrics[f"samples-{t}"]) for t in CFG.task_names}
    assert sum(counts.values()) == int(metrics["num-examples"]) > 0
    # Everyone's favourite here is fashion and DART's shares follow demand.
    assert counts["fashion"] == max(counts.values())
    before = arrays_to_weights(msg.content["arrays"])
    after = arrays_to_weights(reply.content["arrays"])
    assert set(after) == set(before)
    assert any(not np.array_equal(before[k], after[k]) for k in after)
    assert 0.0 <= metrics["slo-met"] <= metrics["requests"]
    assert ctx.state.metric_records["dartfl"]["rounds"] == 1


def test_a_round_is_reproducible_for_a_seed() -> None:
    a = arrays_to_weights(app(_message(2), _context()).content["arrays"])
    b = arrays_to_weights(app(_message(2), _context()).content["arrays"])
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_a_node_without_simulation_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="agent-address"):
        app(_message(), _context({}))


def test_clients_replay_their_own_skewed_workloads() -> None:
    cfg = FlConfig(favourite_tasks="digits,fashion", zipf=2.0)
    first, second = client_arrivals(cfg, 0, 1), client_arrivals(cfg, 1, 1)
    assert np.bincount(first.tasks, minlength=3).argmax() == 0
    assert np.bincount(second.tasks, minlength=3).argmax() == 1
    assert np.array_equal(client_arrivals(cfg, 0, 1).times_s, first.times_s)
    demand = fleet_demand(cfg, 2)
    assert demand["uci-digits"] < demand["digits"]


def test_run_config_is_parsed_and_checked() -> None:
    cfg = FlConfig.from_run_config({"num-server-rounds": 3, "policy": "inference-first", "unknown-key": 1})
    assert cfg.num_server_rounds == 3 and cfg.weighting == "uniform"
    assert FlConfig(policy="dart").weighting == "demand"
    with pytest.raises(ConfigError, match="valid policies"):
        FlConfig(policy="nope")
    with pytest.raises(ConfigError, match="favourite task"):
        FlConfig(favourite_tasks="cifar")


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ({"learning-rate": -1}, "learning-rate must be a finite number > 0"),
        ({"learning-rate": float("nan")}, "learning-rate must be a finite number > 0"),
        ({"step-samples": 0}, "step-samples must be >= 1"),
        ({"max-train-per-task": 0}, "max-train-per-task must be >= 1"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"node-wait-s": -1}, "node-wait-s must be a finite number >= 0"),
        ({"dirichlet-alpha": float("nan")}, "dirichlet-alpha must be >= 0"),
        ({"workloads": "mmpp,nope"}, "valid generators are poisson"),
        ({"profile": "pi9"}, "built-in profiles: pi4"),
        ({"tasks": "digits,letters"}, "unknown letters"),
        ({"tasks": "digits,digits"}, "a task twice"),
    ],
)
def test_bad_run_config_values_are_refused_before_a_run_starts(
    setting: dict[str, object], complaint: str
) -> None:
    # Each of these used to pass the check and fail in round 1, after a simulation had
    # started its SuperLink and Ray (or, for a negative rate, train nothing useful).
    with pytest.raises(ConfigError, match=re.escape(complaint)):
        FlConfig.from_run_config(setting)
