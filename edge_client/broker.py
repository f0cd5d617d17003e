"""MQTT brokers on loopback: a real Mosquitto process, or an embedded amqtt broker.

Mosquitto is what tests and production use; the embedded broker (amqtt, pure Python, on its
own thread and event loop) is the zero-setup default for a single machine. Both bind to
127.0.0.1 only and come back as a `BrokerHandle` that stops them.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from dartfl.errors import ConfigError, DartflError

log = logging.getLogger(__name__)

__all__ = [
    "LOOPBACK",
    "BrokerHandle",
    "BrokerStartError",
    "free_port",
    "parse_broker_url",
    "start_embedded_broker",
    "start_mosquitto",
]

LOOPBACK = "127.0.0.1"
DEFAULT_MQTT_PORT = 1883
START_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0
# Per-client queue bound in Mosquitto: a stalled subscriber must not grow the broker unboundedly.
MAX_QUEUED_MESSAGES = 1000
_AUTO_PORT_TRIES = 3
# A minimal MQTT 3.1.1 CONNECT (clean session, keepalive 60 s, empty client id) and the
# CONNACK that accepts it: proves the port is an MQTT broker, not just any listener.
_PROBE_CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"
_PROBE_CONNACK = b"\x20\x02\x00\x00"
_PROBE_DISCONNECT = b"\xe0\x00"


class BrokerStartError(DartflError):
    """A broker could not be started (missing binary, port in use, no answer in time)."""


class BrokerHandle:
    """A running broker on `host:port`; `stop()` (idempotent) or use it as a context manager."""

    def __init__(
        self, host: str, port: int, kind: str, stop: Callable[[], None], pid: int | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.kind = kind
        self.pid = pid
        self._stop = stop
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stop()

    def __enter__(self) -> BrokerHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"BrokerHandle({self.kind} at {self.url}, pid={self.pid})"


def parse_broker_url(url: str) -> tuple[str, int]:
    """`mqtt://host:port` (or `tcp://`, port defaults to 1883) -> (host, port)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"broker URL {url!r} must look like mqtt://127.0.0.1:1883")
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "tcp"):
        raise ConfigError(
            f"broker URL {url!r} has scheme {parts.scheme!r}; expected mqtt:// (TLS is not supported)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"broker URL {url!r} must be just mqtt://host:port (no path, query or credentials)")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"broker URL {url!r} has a bad port; expected an integer 1-65535") from None
    if not parts.hostname:
        raise ConfigError(f"broker URL {url!r} has no host; expected mqtt://127.0.0.1:1883")
    if port == 0:
        raise ConfigError(f"broker URL {url!r} has port 0; expected 1-65535")
    return parts.hostname, DEFAULT_MQTT_PORT if port is None else port


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _probe_mqtt(port: int, timeout_s: float = 0.5) -> bool:
    """True if an MQTT broker on 127.0.0.1:port accepts a CONNECT."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout_s) as sock:
            sock.sendall(_PROBE_CONNECT)
            answer = b""
            while len(answer) < len(_PROBE_CONNACK):
                chunk = sock.recv(len(_PROBE_CONNACK) - len(answer))
                if not chunk:
                    return False
                answer += chunk
            sock.sendall(_PROBE_DISCONNECT)
            return answer == _PROBE_CONNACK
    except OSError:
        return False


# --- Mosquitto ------------------------------------------------------------------------------


def _mosquitto_conf(port: int) -> str:
    return "\n".join(
        [
            f"listener {port} {LOOPBACK}",
            "allow_anonymous true",
            "persistence false",
            f"max_queued_messages {MAX_QUEUED_MESSAGES}",
            "set_tcp_nodelay true",  # small request/reply packets: no Nagle delay
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "",
        ]
    )


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _stop_process(
    proc: subprocess.Popen[bytes], workdir: tempfile.TemporaryDirectory[str], *, keep_files: bool = False
) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("mosquitto pid %d ignored SIGTERM; killing it", proc.pid)
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
    if not keep_files:
        workdir.cleanup()


def _try_mosquitto(binary: str, port: int) -> BrokerHandle | str:
    """Start Mosquitto on `port`: its handle, or the reason it did not come up."""
    workdir = tempfile.TemporaryDirectory(prefix="dartfl-mosquitto-")
    conf = Path(workdir.name) / "mosquitto.conf"
    conf.write_text(_mosquitto_conf(port))
    log_path = Path(workdir.name) / "mosquitto.log"
    with log_path.open("wb") as log_file:
        # stderr goes to a file we opened, so the log survives Mosquitto dropping root.
        proc = subprocess.Popen(
            [binary, "-c", str(conf)], stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        # Alive after a successful CONNECT: the broker on the port is ours, not a squatter.
        if _probe_mqtt(port) and proc.poll() is None:
            log.info("mosquitto pid %d listening on %s:%d", proc.pid, LOOPBACK, port)
            return BrokerHandle(
                LOOPBACK, port, "mosquitto", lambda: _stop_process(proc, workdir), pid=proc.pid
            )
        time.sleep(0.02)
    exited = proc.poll()
    status = (
        f"exited with code {exited}" if exited is not None else f"not answering after {START_TIMEOUT_S} s"
    )
    _stop_process(proc, workdir, keep_files=True)
    tail = _log_tail(log_path)
    workdir.cleanup()
    return f"mosquitto on {LOOPBACK}:{port} {status}; log tail:\n{tail}"


def start_mosquitto(port: int | None = None, *, mosquitto: str = "mosquitto") -> BrokerHandle:
    """Start a private Mosquitto on 127.0.0.1 (a free port when `port` is None)."""
    binary = shutil.which(mosquitto) or shutil.which(mosquitto, path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        raise BrokerStartError(
            f"Mosquitto binary {mosquitto!r} not found on PATH or in /usr/sbin; "
            "install it with `apt-get install mosquitto` or use the embedded broker"
        )
    tries = 1 if port is not None else _AUTO_PORT_TRIES
    reason = ""
    for _ in range(tries):  # a port picked by free_port() can be taken before Mosquitto binds it
        result = _try_mosquitto(binary, port if port is not None else free_port())
        if isinstance(result, BrokerHandle):
            return result
        reason = result
    raise BrokerStartError(reason)


# --- embedded amqtt -------------------------------------------------------------------------


def _amqtt_config(port: int) -> dict[str, Any]:
    return {
        "listeners": {"default": {"type": "tcp", "bind": f"{LOOPBACK}:{port}"}},
        # Only anonymous auth: the default plugin set adds $SYS publishing and packet logging.
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    }


class _EmbeddedBroker:
    """An amqtt broker serving on a daemon thread with its own event loop."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=f"amqtt-broker-{port}", daemon=True)

    def start(self) -> str | None:
        """Start serving; None on success, else why not."""
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            self.stop()
            return f"amqtt broker on {LOOPBACK}:{self.port} did not start within {START_TIMEOUT_S} s"
        if self._error is not None:
            self._thread.join(STOP_TIMEOUT_S)
            return f"amqtt broker on {LOOPBACK}:{self.port} failed to start: {self._error}"
        return None

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop_event is not None:
            self._loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("amqtt broker thread on port %d did not stop in %s s", self.port, STOP_TIMEOUT_S)

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
            broker = Broker(_amqtt_config(self.port), loop=self._loop)
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


def start_embedded_broker(port: int | None = None) -> BrokerHandle:
    """Start an in-process amqtt broker on 127.0.0.1 (a free port when `port` is None)."""
    tries = 1 if port is not None else _AUTO_PORT_TRIES
    reason = ""
    for _ in range(tries):
        broker = _EmbeddedBroker(port if port is not None else free_port())
        failure = broker.start()
        if failure is None:
            log.info("embedded amqtt broker listening on %s:%d", LOOPBACK, broker.port)
            return BrokerHandle(LOOPBACK, broker.port, "amqtt", broker.stop)
        reason = failure
    raise BrokerStartError(reason)
