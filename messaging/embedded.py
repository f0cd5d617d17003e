"""The embedded MQTT broker: amqtt (pure Python) serving on its own thread and event loop.

The zero-setup broker for a single machine (`messaging.brokers.start_embedded_broker` wraps
it in a BrokerHandle). It speaks MQTT 3.1.1 only, anonymously, without TLS.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["EmbeddedBroker"]


def _amqtt_config(host: str, port: int) -> dict[str, Any]:
    return {
        "listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
        # Only anonymous auth: the default plugin set adds $SYS publishing and packet logging.
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    }


class EmbeddedBroker:
    """An amqtt broker serving on a daemon thread with its own event loop."""

    def __init__(
        self, host: str, port: int, start_timeout_s: float = 5.0, stop_timeout_s: float = 5.0
    ) -> None:
        self.host = host
        self.port = port
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=f"amqtt-broker-{port}", daemon=True)

    def start(self) -> str | None:
        """Start serving; None on success, else why not."""
        self._thread.start()
        if not self._ready.wait(self._start_timeout_s):
            self.stop()
            return f"amqtt broker on {self.host}:{self.port} did not start within {self._start_timeout_s} s"
        if self._error is not None:
            self._thread.join(self._stop_timeout_s)
            return f"amqtt broker on {self.host}:{self.port} failed to start: {self._error}"
        return None

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop_event is not None:
            self._loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(self._stop_timeout_s)
        if self._thread.is_alive():
            log.warning(
                "amqtt broker thread on port %d did not stop in %s s", self.port, self._stop_timeout_s
            )

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
            self._ready.set()  # never leave start() waiting if we died early

    async def _serve(self) -> None:
        from amqtt.broker import Broker  # only the embedded broker needs it

        self._stop_event = asyncio.Event()
        try:
            broker = Broker(_amqtt_config(self.host, self.port), loop=self._loop)
            await broker.start()
        except Exception as exc:  # amqtt wraps bind failures in BrokerError; report any cause
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await self._stop_event.wait()
        try:
            await broker.shutdown()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # amqtt 0.11.4: a QoS 1 delivery still waiting for its PUBACK is cancelled by the
            # session clean-up, and that aborts shutdown() before it closes the listener.
            log.debug("amqtt shutdown interrupted by a cancelled delivery; closing listeners")
            for server in broker._servers.values():
                await server.close_instance()
