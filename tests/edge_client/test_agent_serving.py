"""The device agent serving against a real Mosquitto: its config checks, real model output for
every task, an error code for each malformed input, full queues that reject and drain on stop,
a locally trained model swapped in, telemetry of where its time went, hot swaps under load,
and arrival rates over the time since the last tick."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

from dartfl import protocol
from dartfl.errors import ConfigError
from dartfl.profiles import get_profile
from edge_client.agent import Agent, AgentConfig
from edge_client.agent_ingress import QueuedRequest
from messaging.brokers import BrokerHandle
from messaging.link import MQTT_V5
from tests.edge_client.agent_fixtures import TASKS, Client, Load, start_agent

pytestmark = pytest.mark.integration


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


def test_an_agent_that_did_not_train_exports_no_new_version(broker: BrokerHandle) -> None:
    # The same weights were exported every --publish-every-s as a new version (v56 -> v87 with
    # identical files in a review), which looked like progress on the dashboard.
    running = start_agent(broker.url, publish_every_s=0.3, policy="inference-only")
    try:
        time.sleep(3.0)  # ten exports would have been due
        assert sum(running.agent.device.trained_per_task) == 0
        assert running.agent.runtime.version == 1
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
    # The CPU clocks nest: training steps within compute, compute within the process (the
    # warm-up's price reads the process's CPU less training's, orchestration/pricing.py).
    assert snap.training_cpu_s is not None and snap.compute_cpu_s is not None
    assert snap.process_cpu_s is not None
    assert 0 < snap.training_cpu_s < snap.compute_cpu_s <= snap.process_cpu_s


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
    refused = [r for r in replies if r.status != "ok"]
    # Zero errors. A request that a stall left unable to make its 250-ms SLO is refused
    # `queue-full` since queued requests expire (docs/protocol.md); it used to be answered
    # late, which this test let pass. One such refusal among a few hundred requests was seen
    # in one clean-clone run of the whole suite on the shared 2-core machine.
    assert all(r.status == "rejected" and r.reason == "queue-full" for r in refused)
    assert len(refused) <= 0.01 * load.sent
    seen = {int(r.model_version or 0) for r in replies}
    assert len(seen) >= 8 and max(seen) == 11  # served across the swaps, ending on the last


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
