"""The deployment adapter in-process: a ClientApp hands rounds to a live device agent over
its loopback round channel (no Flower processes; a private Mosquitto)."""

from __future__ import annotations

import contextlib
import http.client
import io
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from dartfl.errors import ConfigError
from dartfl.profiles import get_profile
from dartfl.types import CoreModel
from edge_client.agent import Agent, AgentConfig
from edge_client.client_app import app
from edge_client.round_channel import RoundChannelError, check_local_address, pack, post_round
from fltask.config import FlConfig
from fltask.model import build_model, get_weights
from fltask.records import arrays_to_weights, weights_to_arrays
from messaging.brokers import start_mosquitto

pytestmark = pytest.mark.integration

CFG = FlConfig(
    round_deadline_s=1.5, max_train_per_task=300, learning_rate=0.03, lr_decay=0.5, step_samples=16
)


@pytest.fixture(scope="module", params=["time-shared", "split"])
def agent(request: pytest.FixtureRequest) -> Iterator[Agent]:
    split = request.param == "split"
    profile = get_profile("x86-1core")
    with contextlib.ExitStack() as stack:
        broker_url = None  # the embedded broker
        if split:  # two cores: serving on one while the round trains on the other (Mosquitto)
            profile = replace(profile, cores=CoreModel(2, (1.0, 1.8), (1.0, 1.8), 0.05, 0.05, 0.01))
            broker_url = stack.enter_context(start_mosquitto()).url
        config = AgentConfig(
            device_id=f"fl-dev-{request.param}",
            broker_url=broker_url,
            max_train_per_task=300,
            round_channel="127.0.0.1:0",
            publish_every_s=0.0,
            split_cores=split,
        )
        agent = Agent.create(config, profile)
        assert (agent.device.lanes is not None) == split
        agent.start()
        report: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: report.update(agent.run().to_json()), daemon=True)
        thread.start()
        try:
            yield agent
        finally:
            agent.request_stop()
            thread.join(timeout=60)
            assert not thread.is_alive()


def _message(server_round: int) -> Message:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, server_round
    model = build_model({"digits": 10, "fashion": 10, "uci-digits": 10}, 1.0, seed=7)
    config = ConfigRecord({**CFG.to_run_config(), "server-round": server_round})
    content = RecordDict({"arrays": weights_to_arrays(get_weights(model)), "config": config})
    return Message(content, dst_node_id=5, message_type=MessageType.TRAIN)


def test_a_round_is_trained_by_the_agent_and_returned(agent: Agent) -> None:
    address = agent.round_channel_address
    assert address is not None and address.startswith("127.0.0.1:")
    ctx = Context(
        run_id=1,
        node_id=5,
        node_config={"agent-address": address},
        state=RecordDict(),
        run_config=CFG.to_run_config(),
    )
    version = agent.runtime.version
    msg = _message(3)
    t0 = time.monotonic()
    reply = app(msg, ctx)
    assert time.monotonic() - t0 >= CFG.round_deadline_s  # the agent trained through the deadline
    metrics = reply.content["metrics"]
    counts = {t: int(metrics[f"samples-{t}"]) for t in CFG.task_names}
    assert sum(counts.values()) == int(metrics["num-examples"]) > 0
    # Per-task training loss sums come back for the server's per-round record: a mean
    # cross-entropy per trained sample between 0 and ~ln(10) for a barely trained head.
    for t, n in counts.items():
        if n:
            assert 0.0 < metrics[f"ce-sum-{t}"] / n < 3.0
    # Round 3 trains at learning-rate * lr-decay^2.
    lrs = [g["lr"] for g in agent.runtime.trainer.optimizer.param_groups]
    assert lrs == pytest.approx([0.03 * 0.25] * len(lrs))
    # The run's step-samples reached the agent's trainer (its own default is 32).
    assert agent.runtime.trainer.step_samples == 16
    # Telemetry reports the federated round's length, not the agent's own --round-s (60 s).
    assert agent.report().round.length_s == CFG.round_deadline_s
    before, after = arrays_to_weights(msg.content["arrays"]), arrays_to_weights(reply.content["arrays"])
    assert set(after) == set(before)
    assert any(not np.array_equal(before[k], after[k]) for k in after)
    assert metrics["train-wall-s"] > 0 and metrics["agent-round-s"] >= CFG.round_deadline_s
    assert ctx.state.metric_records["dartfl"]["rounds"] == 1
    deadline = time.monotonic() + 30
    while agent.runtime.version == version and time.monotonic() < deadline:
        time.sleep(0.1)
    assert agent.runtime.version > version  # the global weights were hot-swapped into serving
    # Between rounds the federated agent serves only.
    trained = sum(agent.device.trained_per_task)
    time.sleep(0.6)
    assert sum(agent.device.trained_per_task) == trained


def test_bad_rounds_are_refused_and_the_channel_is_local_only(agent: Agent) -> None:
    address = agent.round_channel_address
    assert address is not None
    with pytest.raises(RoundChannelError, match="tasks"):
        post_round(address, {"round-deadline-s": 0.5, "tasks": ["digits"]}, {}, timeout_s=10)
    with pytest.raises(RoundChannelError, match="learning-rate"):
        post_round(address, {"round-deadline-s": 0.5, "learning-rate": -1}, {}, timeout_s=10)
    with pytest.raises(RoundChannelError, match="step-samples"):
        post_round(address, {"round-deadline-s": 0.5, "step-samples": 0}, {}, timeout_s=10)
    with pytest.raises(RoundChannelError, match="bad round metadata"):
        post_round(address, {"round-deadline-s": 0.5, "server-round": "third"}, {}, timeout_s=10)
    with pytest.raises(RoundChannelError, match="tasks must be a list"):
        post_round(address, {"round-deadline-s": 0.5, "tasks": 3}, {}, timeout_s=10)
    # The agent trains and serves under its own policy: a run of another is refused, not
    # filed under the wrong name.
    with pytest.raises(
        RoundChannelError, match=r"policy .inference-first. differs.*--policy inference-first"
    ):
        post_round(address, {"round-deadline-s": 0.5, "policy": "inference-first"}, {}, timeout_s=10)
    with pytest.raises(RoundChannelError, match=r"loss-weighting .uniform. differs.*--loss-weights uniform"):
        post_round(address, {"round-deadline-s": 0.5, "loss-weighting": "uniform"}, {}, timeout_s=10)
    with pytest.raises(RoundChannelError, match="install"):
        post_round(address, {"round-deadline-s": 0.5}, {"nope": np.zeros(2)}, timeout_s=10)
    # Malformed bodies get a 400 naming the problem; the agent serves on.
    host, port = check_local_address(address)
    for body in (pack({}, {})[:-10], struct.pack(">I", 2) + b"{}", _npy_body(), b"\x00\x00\x00\x09not json!"):
        assert _post(host, port, body) == 400
    assert _post(host, port, b"x", length="ten") == 400
    with pytest.raises(ConfigError, match="loopback"):
        check_local_address("10.0.0.5:8765")
    assert check_local_address("127.0.0.1:8765") == ("127.0.0.1", 8765)


def _npy_body() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    return struct.pack(">I", 2) + b"{}" + buf.getvalue()


def _post(host: str, port: int, body: bytes, length: str | None = None) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest("POST", "/round")
        conn.putheader("Content-Length", length or str(len(body)))
        conn.endheaders()
        conn.send(body)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()
