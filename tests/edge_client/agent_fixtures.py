"""The device agent run for real in tests: started on a thread with x86-1core's known costs,
a requester that collects the replies on its own topic, and a steady load of requests."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from dartfl import protocol
from dartfl.profiles import get_profile
from edge_client.agent import Agent, AgentConfig
from messaging.link import MQTT_V311, Message, connect

TASKS = ("digits", "fashion", "uci-digits")


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
