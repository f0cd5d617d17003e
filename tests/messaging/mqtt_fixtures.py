"""Helpers for tests that need a real MQTT broker: broker starters, a tiny echo device and a
requester, all speaking dartfl.protocol over messaging.link. Logged in, each one's client id
and (for the requester) reply namespace is its account's name. And `mqtt311_only_peer`, an
MQTT 3.1.1 server that refuses MQTT 5 as an older broker does (it routes nothing: the
version negotiation is all it is for). And `ask_then_stop`, for a `dartfl edge run` agent
started as a process: one request once it says where it serves, then SIGTERM.

Import explicitly (`from tests.messaging import mqtt_fixtures as fx`) and wrap the
generators in a local fixture; nothing here is collected or auto-loaded.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Collection, Iterator

import numpy as np

from dartfl import protocol
from messaging.brokers import BrokerHandle, start_mosquitto
from messaging.link import MQTT_V311, Message, MqttLink, connect
from messaging.security import MqttSecurity

__all__ = [
    "EchoDevice",
    "Requester",
    "ask_then_stop",
    "expected_label",
    "mosquitto_broker",
    "mqtt311_only_peer",
    "served_url",
]


def mosquitto_broker() -> Iterator[BrokerHandle]:
    """A private Mosquitto on a free loopback port; raises (never skips) if it cannot start."""
    with start_mosquitto() as broker:
        yield broker


# CONNACK "unacceptable protocol version" (3.1.1 return code 1), as a 3.1.1 broker answers a
# CONNECT of protocol level 5; and the packets a 3.1.1 session needs answered.
_REFUSE_VERSION = b"\x20\x02\x00\x01"
_ACCEPT = b"\x20\x02\x00\x00"


def _read_packet(conn: socket.socket) -> tuple[int, bytes] | None:
    """(first byte, body) of one MQTT packet, or None when the peer has gone."""
    head = conn.recv(1)
    if not head:
        return None
    length, shift = 0, 0
    while True:  # the variable-length "remaining length"
        digit = conn.recv(1)
        if not digit:
            return None
        length += (digit[0] & 0x7F) << shift
        shift += 7
        if not digit[0] & 0x80:
            break
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return head[0], body


def _serve_311(conn: socket.socket, on_v5: str) -> None:
    with conn:
        first = _read_packet(conn)
        if first is None or first[0] >> 4 != 1:  # not a CONNECT
            return
        body = first[1]
        level = body[2 + int.from_bytes(body[:2], "big")]  # after the protocol name
        if level != 4:
            if on_v5 == "refuse":
                conn.sendall(_REFUSE_VERSION)
            elif on_v5 == "silent":  # as amqtt with a will: no answer, the connection held
                while _read_packet(conn) is not None:
                    pass
            return  # "close": closed before any CONNACK
        conn.sendall(_ACCEPT)
        while (packet := _read_packet(conn)) is not None:
            kind, body = packet[0] >> 4, packet[1]
            if kind == 8:  # SUBSCRIBE: grant QoS 0 for every filter
                filters, i = 0, 2
                while i < len(body):
                    i += 2 + int.from_bytes(body[i : i + 2], "big") + 1
                    filters += 1
                conn.sendall(bytes([0x90, 2 + filters]) + body[:2] + b"\x00" * filters)
            elif kind == 12:  # PINGREQ
                conn.sendall(b"\xd0\x00")
            elif kind == 14:  # DISCONNECT
                return


@contextlib.contextmanager
def mqtt311_only_peer(on_v5: str = "refuse") -> Iterator[str]:
    """An MQTT 3.1.1-only server on a free loopback port (its URL): answers an MQTT 5 CONNECT
    with "unacceptable protocol version" (`on_v5` "refuse"), or never ("silent"), or closes the
    connection ("close"); accepts 3.1.1 and grants subscriptions."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_serve_311, args=(conn, on_v5), daemon=True).start()

    thread = threading.Thread(target=accept, name="mqtt311-peer", daemon=True)
    thread.start()
    try:
        yield f"mqtt://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        server.close()


def expected_label(image: np.ndarray) -> int:
    """The echo device's 'model': a deterministic function of the pixels."""
    return int(image.astype(np.int64).sum()) % 10


class EchoDevice:
    """A stand-in device: decodes each request, answers `expected_label`, and answers malformed
    requests with error replies, exactly as the agent must."""

    def __init__(
        self,
        url: str,
        device: str,
        tasks: Collection[str],
        *,
        protocol_version: str = MQTT_V311,
        security: MqttSecurity | None = None,
    ) -> None:
        self.device = device
        self.tasks = frozenset(tasks)
        self.link: MqttLink = connect(
            url,
            f"echo-{device}",
            on_message=self._on_message,
            subscriptions=[(protocol.request_subscription(device), protocol.REQUEST_QOS)],
            protocol=protocol_version,
            security=security,
        )

    def _on_message(self, msg: Message) -> None:
        received = time.perf_counter()
        try:
            _, task = protocol.parse_request_topic(msg.topic)
            request = protocol.decode_request(
                msg.payload,
                task,
                self.tasks,
                response_topic=msg.response_topic,
                correlation_data=msg.correlation_data,
            )
        except protocol.RequestError as err:
            if err.reply_to is not None:
                body = protocol.encode_error(err.correlation_id, err.code, err.detail)
                self.link.publish(
                    err.reply_to, body, protocol.REPLY_QOS, correlation_data=msg.correlation_data
                )
            return
        latency_ms = (time.perf_counter() - received) * 1e3
        body = protocol.encode_reply(request.id, task, expected_label(request.image), latency_ms, "echo-1")
        self.link.publish(
            request.reply_to, body, protocol.REPLY_QOS, correlation_data=request.correlation_data
        )

    def close(self) -> None:
        self.link.close()


class Requester:
    """Sends one request at a time and waits for its reply on a private reply topic."""

    def __init__(
        self,
        url: str,
        name: str,
        *,
        protocol_version: str = MQTT_V311,
        security: MqttSecurity | None = None,
    ) -> None:
        # Under the reply rule: the account's own reply namespace when logged in.
        account = security.username if security is not None else None
        self.reply_to = protocol.reply_topic(account or name)
        self._inbox: queue.Queue[tuple[float, Message]] = queue.Queue()
        self._ids = itertools.count()
        self.link = connect(
            url,
            f"req-{name}",
            on_message=lambda m: self._inbox.put((time.perf_counter(), m)),
            subscriptions=[(self.reply_to, protocol.REPLY_QOS)],
            protocol=protocol_version,
            security=security,
        )

    def send_raw(
        self,
        topic: str,
        payload: bytes,
        *,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
    ) -> float:
        """Publish `payload` as is (MQTT 5 properties optional); returns the send time."""
        sent = time.perf_counter()
        accepted = self.link.publish(
            topic,
            payload,
            protocol.REQUEST_QOS,
            response_topic=response_topic,
            correlation_data=correlation_data,
        )
        if not accepted:
            raise RuntimeError(f"request to {topic} was not accepted by the MQTT client")
        return sent

    def wait_reply(self, timeout_s: float = 5.0) -> tuple[float, Message]:
        """The next message on the reply topic: (receive time, message)."""
        return self._inbox.get(timeout=timeout_s)

    def ask(self, device: str, task: str, image: np.ndarray) -> tuple[protocol.Reply, float]:
        """One request/reply round trip: the decoded reply and the round-trip time in s."""
        request_id = f"q{next(self._ids)}"
        payload = protocol.encode_request(request_id, image, self.reply_to, sent_at=time.time())
        sent = self.send_raw(protocol.request_topic(device, task), payload)
        received, msg = self.wait_reply()
        reply = protocol.decode_reply(msg.payload)
        assert reply.id == request_id, f"reply {reply.id} for request {request_id}"
        return reply, received - sent

    def close(self) -> None:
        self.link.close()


def served_url(agent: subprocess.Popen[str], timeout_s: float) -> str:
    """The broker URL from the agent's "... serving TASKS on mqtt://..." line on stderr."""
    assert agent.stderr is not None
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        line = agent.stderr.readline()
        if not line and agent.poll() is not None:
            break
        lines.append(line)
        if found := re.search(r" serving \S+ on (mqtt://127\.0\.0\.1:\d+)", line):
            return found.group(1)
    raise AssertionError("the agent never said where it serves:\n" + "".join(lines)[-3000:])


def ask_then_stop(
    agent: subprocess.Popen[str], device: str, timeout_s: float
) -> tuple[str, protocol.Reply, str, str]:
    """Ask `agent` (`dartfl edge run --device DEVICE` serving digits, stdout and stderr piped)
    one digits request once it says where it serves, then stop it with SIGTERM: the broker URL,
    the reply, its stdout and the rest of its stderr. It is killed if anything fails on the way."""
    try:
        url = served_url(agent, timeout_s)
        requester = Requester(url, f"{device}-asker")
        try:
            reply, _ = requester.ask(device, "digits", np.zeros((28, 28), np.uint8))
        finally:
            requester.close()
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    return url, reply, out, err
