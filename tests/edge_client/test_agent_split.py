"""The real agent on a split of its cores: a serving lane (ONNX Runtime) and a training lane
(PyTorch) at once, against a real Mosquitto; the split changes at run time."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.types import CoreModel, DeviceProfile
from edge_client.agent import Agent, AgentConfig
from messaging.brokers import BrokerHandle
from tests.edge_client.agent_fixtures import Client, Load, Running

pytestmark = pytest.mark.integration


def two_core_profile() -> DeviceProfile:
    """x86-1core's known costs on two cores that speed items up 1.8x."""
    cores = CoreModel(2, (1.0, 1.8), (1.0, 1.8), 0.05, 0.05, 0.01)
    return dataclasses.replace(get_profile("x86-1core"), cores=cores)


def start_split_agent(url: str, policy: str) -> Running:
    config = AgentConfig(
        device_id=f"split-{os.getpid()}",
        broker_url=url,
        max_train_per_task=300,
        telemetry_period_s=0.2,
        policy=policy,
        split_cores=True,
    )
    agent = Agent.create(config, two_core_profile())
    agent.start()
    report: dict[str, object] = {}
    thread = threading.Thread(target=lambda: report.update(agent.run().to_json()), daemon=True)
    thread.start()
    return Running(agent, thread, report)


def test_a_split_agent_serves_and_trains_at_once_and_moves_cores_without_losing_a_request(
    broker: BrokerHandle,
) -> None:
    running = start_split_agent(broker.url, "cores:1")
    agent, client = running.agent, Client(broker.url)
    # Built at start, off the lanes: no core move builds a session while requests wait.
    assert agent.runtime.engine.prepared_threads == (1, 2)
    device = agent.config.device_id
    splits = []
    with Load(client, device, "s", 0.01) as load:
        # Split, whole, split again: each change lands at a work-item boundary of each lane.
        for spec in ("cores:1", "inference-only", "cores:1"):
            with agent._cond:
                agent.device.policy = make_policy(spec)
            time.sleep(1.5)
            telemetry = agent.report()
            splits.append((telemetry.inference_cores, telemetry.training_cores))
    replies = client.collect(load.sent, timeout_s=30)
    client.link.close()
    report = running.stop()
    assert len(replies) == load.sent and {r.status for r in replies} == {"ok"}  # none lost or refused
    assert splits == [(1, 1), (2, 0), (1, 1)]
    assert report["core_switches"] >= 6  # both lanes move at each of the 3 changes (and the drain)
    assert report["core_reclaims"] == 0  # a static split is held as asked
    assert report["training_lane_busy_s"] > 0.5 and report["serving_lane_busy_s"] > 0.0
    assert report["train_samples"] > 0
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
        assert agent.pinning == {"inference": "", "training": ""}


def test_without_split_cores_the_agent_time_shares_as_before() -> None:
    config = AgentConfig(device_id=f"whole-{os.getpid()}", policy="cores:1", max_train_per_task=300)
    agent = Agent.create(config, two_core_profile())
    try:
        assert agent.device.lanes is None
        assert agent.report().inference_cores is None
        # One thread each: it plans on one core, not at the two cores' 1.8x speed.
        assert agent.profile.cores.count == 1
        one_core = two_core_profile().training
        assert agent._costs.per_sample_s == pytest.approx(one_core.per_sample_s)
    finally:
        agent._release()
