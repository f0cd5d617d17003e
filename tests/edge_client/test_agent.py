"""The device agent end to end against a real Mosquitto: serving, bad input, overflow, drain,
hot swaps under load, and `dartfl edge replay --spawn-agent`."""

from __future__ import annotations

import contextlib
import json
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dartfl import protocol
from dartfl.cli.main import main
from dartfl.errors import ConfigError
from dartfl.profiles import get_profile, load_profile_toml
from edge_client.agent import Agent, AgentConfig
from edge_client.agent_ingress import QueuedRequest
from edge_client.agent_link import DeviceLink
from messaging.brokers import BrokerHandle, free_port, start_mosquitto
from messaging.errors import MqttWaitStoppedError
from messaging.link import MQTT_V5, MQTT_V311, Message, connect
from orchestration.replay_report import HEADLINE_KEYS
from tests.messaging import mqtt_fixtures as fx

pytestmark = pytest.mark.integration

TASKS = ("digits", "fashion", "uci-digits")


@pytest.fixture
def broker() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()


@dataclass
class Running:
    agent: Agent
    thread: threading.Thread
    report: dict[str, Any]

    def stop(self) -> dict[str, Any]:
        self.agent.request_stop()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the agent did not stop"
        return self.report


def start_agent(url: str, **overrides: Any) -> Running:
    config = AgentConfig(
        device_id=overrides.pop("device_id", f"dev-{uuid.uuid4().hex[:6]}"),
        broker_url=url,
        max_train_per_task=300,
        telemetry_period_s=0.2,
        **overrides,
    )
    agent = Agent.create(config, get_profile("x86-1core"))  # known costs: no calibration wait
    agent.start()
    report: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: report.update(agent.run().to_json()), daemon=True)
    thread.start()
    return Running(agent, thread, report)


class Client:
    """A requester that collects every reply on its own topic."""

    def __init__(self, url: str, version: str = MQTT_V311) -> None:
        self.reply_to = protocol.reply_topic("tester", uuid.uuid4().hex[:8])  # the reply rule
        self.replies: queue.Queue[protocol.Reply] = queue.Queue()
        name = f"client-{uuid.uuid4().hex[:6]}"
        self.link = connect(
            url, name, on_message=self._on, subscriptions=[(self.reply_to, 1)], protocol=version
        )

    def _on(self, msg: Message) -> None:
        self.replies.put(protocol.decode_reply(msg.payload))

    def send(self, device: str, task: str, request_id: str, image: np.ndarray | None = None) -> None:
        image = np.zeros((28, 28), np.uint8) if image is None else image
        payload = protocol.encode_request(request_id=request_id, reply_to=self.reply_to, image=image)
        self.link.publish(protocol.request_topic(device, task), payload, qos=1)

    def raw(self, device: str, task: str, payload: bytes) -> None:
        self.link.publish(protocol.request_topic(device, task), payload, qos=1)

    def collect(self, count: int, timeout_s: float = 20.0) -> list[protocol.Reply]:
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                out.append(self.replies.get(timeout=0.2))
        return out


class Load:
    """Requests sent round-robin over TASKS, one every `gap_s`, on a thread while the `with`
    block runs; `sent` counts them."""

    def __init__(self, client: Client, device: str, prefix: str, gap_s: float) -> None:
        self.client, self.device, self.prefix, self.gap_s = client, device, prefix, gap_s
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send)

    def _send(self) -> None:
        while not self._stop.is_set():
            self.client.send(self.device, TASKS[self.sent % 3], f"{self.prefix}{self.sent}")
            self.sent += 1
            time.sleep(self.gap_s)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def valid_payload(reply_to: str, request_id: str) -> dict[str, Any]:
    return json.loads(
        protocol.encode_request(request_id=request_id, reply_to=reply_to, image=np.zeros((28, 28), np.uint8))
    )


@pytest.mark.parametrize("field", ["round_target_samples", "publish_every_s", "drain_s", "seed"])
def test_config_rejects_a_negative_target_interval_or_seed(field: str) -> None:
    with pytest.raises(ConfigError, match=f"{field.replace('_', '-')} must be >= 0, got -1"):
        AgentConfig(**{field: -1})


def test_agent_answers_every_task_with_real_model_output(broker: BrokerHandle) -> None:
    running = start_agent(broker.url)
    client = Client(broker.url)
    try:
        device = running.agent.config.device_id
        rng = np.random.default_rng(0)
        for i in range(30):
            client.send(device, TASKS[i % 3], f"r{i}", rng.integers(0, 255, (28, 28), dtype=np.uint8))
        replies = client.collect(30)
        assert len(replies) == 30
        assert {r.status for r in replies} == {"ok"}
        assert {r.id for r in replies} == {f"r{i}" for i in range(30)}
        assert all(0 <= (r.label or 0) < 10 and (r.latency_ms or 0) > 0 for r in replies)
        assert {r.model_version for r in replies} == {"1"}
    finally:
        client.link.close()
        report = running.stop()
    assert report["replies"] == 30 and report["errors"] == 0


def test_every_malformed_input_gets_its_error_code_and_the_agent_keeps_serving(broker: BrokerHandle) -> None:
    running = start_agent(broker.url)
    client = Client(broker.url, MQTT_V5)
    device = running.agent.config.device_id
    cases: dict[str, bytes] = {}
    base = valid_payload(client.reply_to, "x")

    def variant(request_id: str, **changes: Any) -> bytes:
        body = {**base, "id": request_id, **changes}
        return json.dumps({k: v for k, v in body.items() if v is not None}).encode()

    cases["unsupported-version"] = variant("v", v=99)
    cases["missing-field"] = variant("m", data=None)
    cases["bad-shape"] = variant("s", shape=[27, 28])
    cases["bad-dtype"] = variant("d", dtype="float64")
    cases["bad-data"] = variant("b", data="!!not base64!!")
    try:
        for payload in cases.values():
            client.raw(device, "digits", payload)
        client.raw(device, "no-such-task", variant("u"))
        client.raw(
            device, "digits", b'{"v": 1, "id": "j", "reply_to": "' + client.reply_to.encode() + b'", oops'
        )
        # Too big to be parsed at all: only an MQTT 5 Response Topic lets the agent answer it.
        client.link.publish(
            protocol.request_topic(device, "digits"),
            variant("ignored", pad="x" * 20_000),
            qos=1,
            response_topic=client.reply_to,
            correlation_data=b"o",
        )
        cases["oversized-payload"] = b""
        replies = {r.id: r for r in client.collect(len(cases) + 2)}
        codes = {r.code for r in replies.values()}
        assert set(cases) | {"unknown-task"} <= codes
        assert all(r.status == "error" for r in replies.values())
        # Still serving after all that.
        client.send(device, "fashion", "after")
        (after,) = client.collect(1)
        assert after.id == "after" and after.status == "ok"
    finally:
        client.link.close()
        report = running.stop()
    assert report["errors"] >= len(cases) + 1


def test_full_queues_reject_and_the_rest_is_drained_on_stop(broker: BrokerHandle) -> None:
    # static:0 gives inference no share while training runs, so requests pile up: a queue of 8
    # must reject the rest explicitly; stopping then drains the 8 with answers.
    running = start_agent(broker.url, policy="static:0", queue_capacity=8)
    client = Client(broker.url)
    device = running.agent.config.device_id
    try:
        time.sleep(1.0)  # past the warm-up period, so training is on
        for i in range(60):
            client.send(device, "digits", f"q{i}")
        early = client.collect(52, timeout_s=10)
        assert len(early) == 52
        assert {r.status for r in early} == {"rejected"} and {r.reason for r in early} == {"queue-full"}
        assert max(running.agent.device.backlog()) <= 8
        report = running.stop()
        drained = client.collect(8, timeout_s=10)
    finally:
        client.link.close()
    assert len(drained) == 8 and {r.status for r in drained} == {"ok"}
    assert report["drained"] == 8 and report["rejected"] == 52


def test_a_standalone_agent_serves_its_locally_trained_model(broker: BrokerHandle) -> None:
    running = start_agent(broker.url, publish_every_s=0.5)
    try:
        deadline = time.monotonic() + 20
        while running.agent.runtime.version < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert running.agent.runtime.version >= 2  # exported in the background and swapped in
        assert sum(running.agent.device.trained_per_task) > 0
    finally:
        running.stop()


def test_telemetry_says_where_the_devices_time_went(broker: BrokerHandle) -> None:
    running = start_agent(broker.url)
    client = Client(broker.url)
    try:
        device = running.agent.config.device_id
        for i in range(40):
            client.send(device, TASKS[i % 3], f"r{i}")
        assert len(client.collect(40)) == 40
        deadline = time.monotonic() + 20
        while running.agent.report().training_busy_s == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        snap = running.agent.report()
    finally:
        client.link.close()
        running.stop()
    assert snap.uptime_s is not None and snap.idle_s is not None
    assert snap.inference_busy_s is not None and snap.training_busy_s is not None
    assert snap.inference_busy_s > 0 and snap.training_busy_s > 0
    assert set(snap.training_busy_s_per_task) == set(TASKS)
    assert sum(snap.training_busy_s_per_task.values()) == pytest.approx(snap.training_busy_s)
    busy = snap.inference_busy_s + snap.training_busy_s
    assert snap.idle_s == pytest.approx(snap.uptime_s - busy)  # the three add up to the uptime


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


@pytest.mark.slow
def test_ten_hot_swaps_under_load_lose_nothing(broker: BrokerHandle) -> None:
    running = start_agent(broker.url)
    client = Client(broker.url)
    device = running.agent.config.device_id
    with Load(client, device, "h", 0.005) as load:
        versions = []
        for _ in range(10):
            versions.append(running.agent.runtime.publish_model())
            time.sleep(0.3)  # let requests flow on each version
    replies = client.collect(load.sent, timeout_s=30)
    client.link.close()
    running.stop()
    assert versions == list(range(2, 12))
    assert len(replies) == load.sent  # zero lost
    assert {r.status for r in replies} == {"ok"}  # zero errors
    seen = {int(r.model_version or 0) for r in replies}
    assert len(seen) >= 8 and max(seen) == 11  # served across the swaps, ending on the last


@pytest.mark.slow
def test_replay_with_a_spawned_agent_loses_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--duration-s", "8", "--rate", "40"]
    args += ["--slo-ms", "250", "--json", "--no-store", "--agent-arg=--max-train", "--agent-arg=300"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(HEADLINE_KEYS) <= set(out) and set(out["send_lag_s"]) == {"p50", "p95", "p99", "max"}
    assert out["requests"] > 200
    assert out["lost"] == 0 and out["errors"] == 0
    assert out["replies"] == out["requests"]
    assert out["train_samples"] > 0
    assert 0.0 < out["harvest_efficiency"] <= 1.0  # against the real device's fluid limit
    assert out["agent_report"]["requests"] == out["requests"] + 1  # and the replay's probe request


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


def test_arrival_rates_count_the_time_since_the_last_tick() -> None:
    # A tick that comes late (behind a long batch) saw the arrivals of more than a period;
    # dividing by the nominal period read them as a burst.
    config = AgentConfig(device_id="rates", max_train_per_task=100, period_s=0.25)
    agent = Agent.create(config, get_profile("x86-1core"))
    try:
        for i in range(10):
            request = QueuedRequest(f"r{i}", 0, "test/reply", np.zeros((28, 28), np.uint8), 0.0)
            assert agent._admit(0.0, 0, request, 0.0) == "queued"
        agent._last_tick_s = 100.0
        agent._tick(101.0)  # one second, four nominal periods, since the last tick
        assert agent.device.rates.rates_per_s[0] == pytest.approx(10.0)
    finally:
        agent.runtime.close()


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


@pytest.mark.slow
def test_a_replay_sized_by_the_agent_is_sized_by_what_it_measures_under_traffic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 13: sized by the agent's calibration, the README's replay sent several times what
    # the agent could serve. Here the agent starts from a profile 100x too cheap.
    cheap = tmp_path / "cheap.toml"
    cheap.write_text(
        "name = 'cheap'\n[inference]\nbatch-fixed-s = 1e-6\nper-request-s = 1e-6\nmax-batch = 32\n"
        "[training]\nmicrobatch-fixed-s = 1e-3\nper-sample-s = 1e-3\nmax-microbatch = 32\n"
        "[request-path]\nreceive-s = 1e-6\ningress-s = 1e-6\negress-s = 1e-6\n"
    )
    said = load_profile_toml(cheap).capacity_per_s(TASKS, (1.0,) * len(TASKS))
    args = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--duration-s", "5"]
    args += ["--target-load", "0.3", "--json", "--no-store", "--policy", "inference-only"]
    args += [f"--agent-arg=--profile-file={cheap}", "--agent-arg=--max-train", "--agent-arg=300"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert "under traffic" in caplog.text  # it says why it sends before the replay
    learnt = protocol.profile_from_json(out["agent_report"]["profile"])
    measured = learnt.capacity_per_s(TASKS, (1.0,) * len(TASKS))
    rate = out["requests"] / 5.0
    assert measured < said / 20  # the agent found out what its requests cost
    assert rate == pytest.approx(0.3 * measured, rel=0.5)  # and the replay was sized by it
    assert out["lost"] == 0 and out["replies"] == out["requests"]
