"""The device agent's lifecycle: the temporary model directory removed however it stops (or
fails to be built) while a given one is kept, and its retained status, republished after a
broker restart, "offline" when it fails and not "online" again while it stops."""

from __future__ import annotations

import contextlib
import json
import queue
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dartfl import protocol
from dartfl.errors import ConfigError
from dartfl.profiles import get_profile
from edge_client.agent import Agent, AgentConfig
from edge_client.agent_link import DeviceLink
from messaging.brokers import BrokerHandle, free_port, start_mosquitto
from messaging.errors import MqttWaitStoppedError
from messaging.link import connect
from tests.edge_client.agent_fixtures import Client, start_agent

pytestmark = pytest.mark.integration


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where tempfile makes directories during the test, so what an agent leaves can be seen."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_a_stopped_agent_removes_its_temp_model_dir_but_keeps_a_given_one(
    broker: BrokerHandle, temp_root: Path, tmp_path: Path
) -> None:
    own = start_agent(broker.url)
    assert own.agent.runtime.model_dir.parent == temp_root
    own.stop()
    assert list(temp_root.glob("dartfl-*")) == []
    given = start_agent(broker.url, model_dir=tmp_path / "models")
    given.stop()
    assert (tmp_path / "models" / "v1").is_dir()
    # A restarted agent reuses its --model-dir ("v1 already exists" refused it).
    again = start_agent(broker.url, model_dir=tmp_path / "models")
    again.stop()
    assert (tmp_path / "models" / "v1").is_dir()


def test_an_agent_stopped_while_waiting_for_its_broker_removes_its_temp_model_dir(temp_root: Path) -> None:
    config = AgentConfig(device_id="nobroker", broker_url="mqtt://127.0.0.1:9", max_train_per_task=100)
    agent = Agent.create(config, get_profile("x86-1core"))
    assert agent.runtime.model_dir.is_dir()
    threading.Timer(1.0, agent.request_stop).start()  # a SIGTERM while it waits
    with pytest.raises(MqttWaitStoppedError, match=r"127\.0\.0\.1:9"):
        agent.start()  # nothing listens on the discard port: it waits until stopped
    assert list(temp_root.glob("dartfl-*")) == []


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [({"policy": "nope"}, "unknown policy 'nope'"), ({"tasks": ("no-such-task",)}, "no-such-task")],
)
def test_an_agent_that_cannot_be_built_leaves_no_temp_dir(
    temp_root: Path, overrides: dict[str, Any], problem: str
) -> None:
    # A bad policy spec is refused with the config, before any directory or model exists.
    with pytest.raises(ConfigError, match=problem):
        Agent.create(AgentConfig(max_train_per_task=100, **overrides), get_profile("x86-1core"))
    assert list(temp_root.glob("dartfl-*")) == []


def _retained_status(url: str, device: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """The retained status of `device`, waiting for one to exist."""
    got: queue.Queue[dict[str, Any]] = queue.Queue()
    topic = protocol.status_topic(device)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        name = f"status-{uuid.uuid4().hex[:6]}"
        on_message = lambda m: got.put(json.loads(m.payload))  # noqa: E731
        with (
            connect(url, name, on_message=on_message, subscriptions=[(topic, 1)]),
            contextlib.suppress(queue.Empty),
        ):
            return got.get(timeout=1.0)
    raise AssertionError(f"no retained status of {device} within {timeout_s} s")


def test_the_online_status_comes_back_after_the_broker_restarts() -> None:
    # A broker restarted without persistence lost the retained "online" (and the cost
    # profile that `edge replay --target-load` reads): the agent republishes it on reconnect.
    port = free_port()
    with start_mosquitto(port) as broker:
        running = start_agent(broker.url)
        device = running.agent.config.device_id
        assert _retained_status(broker.url, device)["state"] == "online"
    try:
        with start_mosquitto(port) as again:
            status = _retained_status(again.url, device)
            assert status["state"] == "online" and "profile" in status
            running.stop()
    finally:
        running.agent.request_stop()


def test_an_agent_that_fails_says_offline_before_it_disconnects(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its clean disconnect makes the broker drop the last will: without an explicit "offline"
    # a dead agent stayed "online" on the dashboard.
    config = AgentConfig(
        device_id=f"dev-{uuid.uuid4().hex[:6]}", broker_url=broker.url, max_train_per_task=300
    )
    agent = Agent.create(config, get_profile("x86-1core"))
    device = config.device_id

    def broken(batch: object) -> int:
        raise RuntimeError("the model broke")

    monkeypatch.setattr(agent, "_serve", broken)
    agent.start()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            agent.run()
        except RuntimeError as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client = Client(broker.url)
    try:
        client.send(device, "digits", "q1")
        thread.join(timeout=30)
        assert not thread.is_alive() and str(failure[0]) == "the model broke"  # run() re-raises
    finally:
        client.link.close()
    status = _retained_status(broker.url, device)
    assert status["state"] == "offline" and status["error"] == "the agent failed"


def test_a_reconnect_while_stopping_does_not_say_online_again() -> None:
    # The reconnect hook republished "online" unconditionally: a link that came back during
    # the shutdown flush overwrote the "offline" a stopped agent had just published.
    config = AgentConfig(device_id="stopping", max_train_per_task=100)
    agent = Agent.create(config, get_profile("x86-1core"))
    published: list[bytes] = []

    class Link:
        def publish(self, topic: str, payload: bytes, qos: int = 1, *, retain: bool = False) -> bool:
            published.append(payload)
            return True

    try:
        agent._link = DeviceLink(config.device_id, Link(), None)  # type: ignore[arg-type]
        agent._republish_online()
        assert json.loads(published[-1])["state"] == "online"
        agent.request_stop()
        agent._republish_online()
        assert len(published) == 1
    finally:
        agent.runtime.close()
