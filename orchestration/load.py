"""A steady request load on every device agent over MQTT, for deploy-local: it counts the
replies and their latencies, so a run shows what serving looked like while the rounds ran."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.errors import DartflError

__all__ = ["LoadGenerator"]


@dataclass
class _DeviceLoad:
    sent: int = 0
    replies: int = 0
    ok: int = 0
    latencies_s: list[float] = field(default_factory=list)


class LoadGenerator:
    """Sends requests at a steady rate to every device over MQTT until stopped; counts replies."""

    def __init__(
        self, broker_url: str, devices: list[str], tasks: tuple[str, ...], rate_per_s: float
    ) -> None:
        from dartfl import protocol
        from messaging.link import connect

        self._protocol = protocol
        self.devices = devices
        self.tasks = tasks
        self.rate = rate_per_s
        self.load = {d: _DeviceLoad() for d in devices}
        self._sent_at: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Under the reply rule (docs/protocol.md); the private loopback broker has no accounts.
        self.reply_to = protocol.reply_topic("deploy-local", uuid.uuid4().hex[:10])
        self._link = connect(
            broker_url,
            client_id=f"dartfl-load-{uuid.uuid4().hex[:8]}",
            on_message=self._on_message,
            subscriptions=[(self.reply_to, 1)],
        )
        self._thread = threading.Thread(target=self._send_loop, name="load", daemon=True)

    def _on_message(self, message: Any) -> None:
        now = time.monotonic()
        try:
            reply = self._protocol.decode_reply(message.payload)
        except DartflError:
            return
        with self._lock:
            sent = self._sent_at.pop(reply.id or "", None)
            if sent is None:
                return
            device, t0 = sent
            load = self.load[device]
            load.replies += 1
            if reply.status == "ok":
                load.ok += 1
                load.latencies_s.append(now - t0)

    def _send_loop(self) -> None:
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (64, 28, 28), dtype=np.uint8)
        i = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            for device in self.devices:
                task = self.tasks[i % len(self.tasks)]
                rid = f"{device}-{i}"
                payload = self._protocol.encode_request(
                    request_id=rid, reply_to=self.reply_to, image=images[i % len(images)]
                )
                with self._lock:
                    self._sent_at[rid] = (device, time.monotonic())
                    self.load[device].sent += 1
                self._link.publish(self._protocol.request_topic(device, task), payload, qos=1)
            i += 1
            next_at += float(rng.exponential(1.0 / self.rate))
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self._thread.start()

    def stop(self, settle_s: float = 3.0) -> dict[str, dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=10)
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._sent_at:
                    break
            time.sleep(0.1)
        self._link.close()
        out = {}
        with self._lock:
            for device, load in self.load.items():
                lat = np.asarray(load.latencies_s) if load.latencies_s else None
                out[device] = {
                    "sent": load.sent,
                    "replies": load.replies,
                    "ok": load.ok,
                    "p50_latency_ms": float(np.percentile(lat, 50) * 1e3) if lat is not None else None,
                    "p99_latency_ms": float(np.percentile(lat, 99) * 1e3) if lat is not None else None,
                }
        return out
