"""A device whose policy fails (a plugin's bug, docs/plugins.md) serves on without training
and says why in its retained status: live traffic is never dropped for a policy's fault."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dartfl import protocol
from messaging.brokers import start_mosquitto
from messaging.link import connect
from tests.edge_client.agent_fixtures import TASKS, Client, start_agent
from tests.plugin_fixtures import on_path, write_plugin

pytestmark = pytest.mark.integration

FAILS_LATER = """
from dartfl.policies.inference_first import InferenceFirst


class FailsLater(InferenceFirst):
    \"\"\"Trains like inference-first for three periods, then raises.\"\"\"

    decided = 0

    def decide(self, obs):
        FailsLater.decided += 1
        if FailsLater.decided > 3:
            raise KeyError("backlog")
        return super().decide(obs)
"""


def _status(url: str, device: str) -> dict[str, Any]:
    got: queue.Queue[dict[str, Any]] = queue.Queue()
    on_message = lambda m: got.put(json.loads(m.payload))  # noqa: E731
    with connect(
        url,
        f"status-{uuid.uuid4().hex[:6]}",
        on_message=on_message,
        subscriptions=[(protocol.status_topic(device), 1)],
    ):
        return got.get(timeout=10.0)


def test_an_agent_whose_policy_fails_answers_every_request_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_plugin(
        tmp_path, "late-pkg", {"fails-later": "late_policy:FailsLater"}, "late_policy", FAILS_LATER
    )
    on_path(monkeypatch, root, "late_policy")
    with start_mosquitto() as broker:
        running = start_agent(broker.url, policy="fails-later")
        device = running.agent.config.device_id
        try:
            deadline = time.monotonic() + 20.0
            while running.agent.device.policy.name != "inference-only" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert running.agent.device.policy.name == "inference-only", "the failed policy was not replaced"
            client = Client(broker.url)
            for i in range(30):
                client.send(device, TASKS[i % 3], f"r{i}")
            replies = client.collect(30)
            assert len(replies) == 30 and all(r.status == "ok" for r in replies)
            status = None
            while time.monotonic() < deadline + 20.0:
                status = _status(broker.url, device)
                if "error" in status:
                    break
                time.sleep(0.2)
            assert status is not None and status["state"] == "online"
            assert (
                "policy 'fails-later' failed" in status["error"] and "KeyError: 'backlog'" in status["error"]
            )
            assert "serving on with inference-only" in status["error"]
        finally:
            with contextlib.suppress(Exception):
                running.stop()
        assert running.thread is not None and not running.thread.is_alive()


SLOW = """
import time

from dartfl.policies.inference_first import InferenceFirst


class Slow(InferenceFirst):
    def decide(self, obs):
        time.sleep(0.04)
        return super().decide(obs)
"""


def test_an_agent_says_once_a_minute_that_its_policy_decides_slowly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = write_plugin(tmp_path, "slow-pkg", {"slow": "slow_policy:Slow"}, "slow_policy", SLOW)
    on_path(monkeypatch, root, "slow_policy")
    with start_mosquitto() as broker, caplog.at_level(logging.WARNING, logger="edge_client.agent"):
        running = start_agent(broker.url, policy="slow")
        try:
            time.sleep(2.0)  # eight periods or so, every decision 40 ms of a 250-ms period
        finally:
            running.stop()
    said = [r.getMessage() for r in caplog.records if "to decide" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("policy 'slow' took 4") and "of the 250 ms control period" in said[0]
