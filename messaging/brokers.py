"""MQTT brokers on loopback: a private Mosquitto process.

Mosquitto is what tests and production use (optionally with a TLS listener, `MosquittoTls`),
and a private one on a free loopback port is the zero-setup default of a single machine (an
agent without --broker, a replay with --spawn-agent, deploy-local). It binds to 127.0.0.1 only
and comes back as a `BrokerHandle` that stops it. Broker URLs are `mqtt://host:port` or, with
TLS, `mqtts://host:port`.

There is no in-process broker. amqtt, the one there was, cannot share an environment with
Flower 1.42 (typer<0.21, PyYAML>=6.0.2): 0.11 pins typer 0.15.4, 0.12 wants typer>=0.24, 0.10
PyYAML<6. And a Python broker inside the agent's process competes with inference for its GIL.
"""

from __future__ import annotations

import getpass
import logging
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from dartfl.errors import ConfigError, DartflError

log = logging.getLogger(__name__)

__all__ = [
    "LOOPBACK",
    "BrokerAddress",
    "BrokerHandle",
    "BrokerStartError",
    "MosquittoTls",
    "find_mosquitto",
    "free_port",
    "parse_broker_address",
    "parse_broker_url",
    "start_mosquitto",
    "start_mosquitto_with_config",
]

LOOPBACK = "127.0.0.1"
DEFAULT_MQTT_PORT = 1883
DEFAULT_MQTTS_PORT = 8883
START_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0
# Per-client queue bounds in Mosquitto: a stalled subscriber must not grow the broker without
# bound, but a burst to a busy agent must not be dropped silently either (a drop is a request
# nobody ever answers). 100,000 requests are under 100 MB; an agent that falls that far behind
# is refusing with replies long before (its own queues are bounded, docs/protocol.md).
MAX_QUEUED_MESSAGES = 100_000
MAX_QUEUED_BYTES = 128 * 1024 * 1024
# The largest packet the broker takes: a telemetry snapshot may be up to 1 MiB (the decoder's
# limit), requests 16 KiB. Larger publishes are refused at the broker, before a subscriber
# such as a Pi's agent has to receive them whole and then drop them.
MAX_PACKET_BYTES = 2 * 1024 * 1024
_AUTO_PORT_TRIES = 3
# A minimal MQTT 3.1.1 CONNECT (clean session, keepalive 60 s, empty client id) and the
# CONNACK that accepts it: proves the port is an MQTT broker, not just any listener.
_PROBE_CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"
_PROBE_CONNACK = b"\x20\x02\x00\x00"
_PROBE_REFUSED = b"\x20\x02\x00\x05"  # not authorized: a broker without anonymous access
_PROBE_DISCONNECT = b"\xe0\x00"


class BrokerStartError(DartflError):
    """A broker could not be started (missing binary, port in use, no answer in time)."""


class BrokerHandle(AbstractContextManager["BrokerHandle"]):
    """A running broker on `host:port`; `stop()` (idempotent) or use it as a context manager."""

    def __init__(
        self,
        host: str,
        port: int,
        kind: str,
        stop: Callable[[], None],
        pid: int | None = None,
        tls_port: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.kind = kind
        self.pid = pid
        self.tls_port = tls_port  # a second, TLS listener (start_mosquitto(tls=...))
        self._stop = stop
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str | None:
        return None if self.tls_port is None else f"mqtts://{self.host}:{self.tls_port}"

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stop()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"BrokerHandle({self.kind} at {self.url}, pid={self.pid})"


@dataclass(frozen=True)
class BrokerAddress:
    """Where a broker listens, and whether it speaks TLS there (an mqtts:// URL)."""

    host: str
    port: int
    tls: bool = False


def parse_broker_address(url: str) -> BrokerAddress:
    """`mqtt://host:port` (or `tcp://`; port 1883 by default) or `mqtts://host:port` (TLS,
    port 8883 by default) -> BrokerAddress."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"broker URL {url!r} must look like mqtt://127.0.0.1:1883 or mqtts://HOST:8883")
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "tcp", "mqtts"):
        raise ConfigError(
            f"broker URL {url!r} has scheme {parts.scheme!r}; expected mqtt:// or mqtts:// (TLS)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(
            f"broker URL {url!r} must be just {parts.scheme}://host:port (no path, query or "
            "credentials; give --mqtt-username and $DARTFL_MQTT_PASSWORD instead)"
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"broker URL {url!r} has a bad port; expected an integer 1-65535") from None
    if not parts.hostname:
        raise ConfigError(f"broker URL {url!r} has no host; expected mqtt://127.0.0.1:1883")
    if port == 0:
        raise ConfigError(f"broker URL {url!r} has port 0; expected 1-65535")
    tls = parts.scheme == "mqtts"
    default = DEFAULT_MQTTS_PORT if tls else DEFAULT_MQTT_PORT
    return BrokerAddress(parts.hostname, default if port is None else port, tls)


def parse_broker_url(url: str) -> tuple[str, int]:
    """(host, port) of a broker URL; see `parse_broker_address`."""
    address = parse_broker_address(url)
    return address.host, address.port


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _probe_mqtt(port: int, timeout_s: float = 0.5) -> bool:
    """True if an MQTT broker on 127.0.0.1:port answers a CONNECT (accepting it, or refusing
    it for want of a login)."""
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
            return answer in (_PROBE_CONNACK, _PROBE_REFUSED)
    except OSError:
        return False


# --- Mosquitto ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MosquittoTls:
    """A TLS listener next to the plain one (which stays: it is how start-up is detected).

    `require_certificate`: clients must present a certificate signed by `ca_file`;
    `password_file` (made with `mosquitto_passwd`): clients must log in on this listener."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    require_certificate: bool = False
    password_file: Path | None = None


def _mosquitto_conf(port: int, tls: MosquittoTls | None = None, tls_port: int = 0) -> str:
    lines = []
    if tls is not None:
        # Authentication settings then belong to the listener above them. Running as root,
        # Mosquitto would switch to the `mosquitto` user before reading the key, which cannot
        # open the caller's private files: stay the caller.
        lines += ["per_listener_settings true", f"user {getpass.getuser()}"]
    lines += [
        f"listener {port} {LOOPBACK}",
        "allow_anonymous true",
        "persistence false",
        f"max_queued_messages {MAX_QUEUED_MESSAGES}",
        f"max_queued_bytes {MAX_QUEUED_BYTES}",
        f"max_packet_size {MAX_PACKET_BYTES}",
        "set_tcp_nodelay true",  # small request/reply packets: no Nagle delay
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
    ]
    if tls is not None:
        lines += [
            f"listener {tls_port} {LOOPBACK}",
            f"cafile {tls.ca_file}",
            f"certfile {tls.cert_file}",
            f"keyfile {tls.key_file}",
            f"require_certificate {str(tls.require_certificate).lower()}",
        ]
        if tls.password_file is not None:
            lines += ["allow_anonymous false", f"password_file {tls.password_file}"]
        else:
            lines.append("allow_anonymous true")
    return "\n".join([*lines, ""])


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


def _try_mosquitto(binary: str, config: str, port: int, tls_port: int | None) -> BrokerHandle | str:
    """Start Mosquitto on `config` (listening on `port`, and `tls_port`): its handle, or the
    reason it did not come up."""
    workdir = tempfile.TemporaryDirectory(prefix="dartfl-mosquitto-")
    conf = Path(workdir.name) / "mosquitto.conf"
    conf.write_text(config)
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
        # Mosquitto opens every listener before it serves any, so the TLS one is up too.
        if _probe_mqtt(port) and proc.poll() is None:
            log.info("mosquitto pid %d listening on %s:%d", proc.pid, LOOPBACK, port)
            return BrokerHandle(
                LOOPBACK,
                port,
                "mosquitto",
                lambda: _stop_process(proc, workdir),
                pid=proc.pid,
                tls_port=tls_port,
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


def find_mosquitto(mosquitto: str = "mosquitto") -> str:
    """The path of the Mosquitto binary (PATH, then /usr/sbin, where Debian puts it);
    BrokerStartError saying how to install it when there is none."""
    binary = shutil.which(mosquitto) or shutil.which(mosquitto, path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        raise BrokerStartError(
            f"Mosquitto ({mosquitto!r}) is not installed: not on PATH nor in /usr/sbin; install it "
            "with `sudo apt-get install mosquitto` (Debian, Raspberry Pi OS, Ubuntu/JetPack) or "
            "`brew install mosquitto` (macOS)"
        )
    return binary


def start_mosquitto(
    port: int | None = None, *, mosquitto: str = "mosquitto", tls: MosquittoTls | None = None
) -> BrokerHandle:
    """Start a private Mosquitto on 127.0.0.1 (a free port when `port` is None), with a TLS
    listener on another free port when `tls` is given (`handle.tls_url`)."""
    binary = find_mosquitto(mosquitto)
    tries = 1 if port is not None else _AUTO_PORT_TRIES
    reason = ""
    for _ in range(tries):  # a port picked by free_port() can be taken before Mosquitto binds it
        plain, tls_port = port if port is not None else free_port(), free_port()
        config = _mosquitto_conf(plain, tls, tls_port)
        result = _try_mosquitto(binary, config, plain, tls_port if tls is not None else None)
        if isinstance(result, BrokerHandle):
            return result
        reason = result
    raise BrokerStartError(reason)


def start_mosquitto_with_config(
    config: str, port: int, *, tls_port: int | None = None, mosquitto: str = "mosquitto"
) -> BrokerHandle:
    """Start Mosquitto on a config of the caller's (the production set-up of `dartfl broker
    setup`, in tests): it must listen on 127.0.0.1:`port` (plain MQTT, where start-up is
    detected, logins or not) and may add a TLS listener on `tls_port`."""
    result = _try_mosquitto(find_mosquitto(mosquitto), config, port, tls_port)
    if isinstance(result, str):
        raise BrokerStartError(result)
    return result
