"""Reads served from a buffer (messaging.buffered_socket): the bytes paho asks for, in order,
from one system call; nothing stranded in the buffer; and, on a real broker, every message of
a burst delivered in order with TCP_NODELAY still set on the socket underneath."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator

import pytest

from messaging.brokers import BrokerHandle
from messaging.buffered_socket import BufferedReadClient, BufferedSocket, raw_socket
from messaging.link import MQTT_V5, MQTT_V311, Message, connect
from tests.messaging import mqtt_fixtures as fx


class _CountingSocket:
    """A socket that counts its recv calls."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.recvs = sock, 0

    def recv(self, size: int) -> bytes:
        self.recvs += 1
        return self.sock.recv(size)

    def __getattr__(self, name: str) -> object:
        return getattr(self.sock, name)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_byte_at_a_time_reads_come_from_one_system_call(pair: tuple[socket.socket, socket.socket]) -> None:
    sender, receiver = pair
    packets = [bytes([0x30, 3]) + b"abc", bytes([0x40, 2]) + b"\x00\x07", bytes([0x30, 1]) + b"z"]
    sender.sendall(b"".join(packets))
    counting = _CountingSocket(receiver)
    buffered = BufferedSocket(counting)
    got = []
    for _ in packets:  # as paho reads one: command byte, length byte, body
        command, length = buffered.recv(1), buffered.recv(1)
        got.append(command + length + buffered.recv(length[0]))
    assert got == packets
    assert counting.recvs == 1
    assert buffered.pending() == 0


def test_pending_counts_what_paho_has_not_taken(pair: tuple[socket.socket, socket.socket]) -> None:
    sender, receiver = pair
    sender.sendall(b"0123456789")
    buffered = BufferedSocket(receiver)
    assert buffered.recv(4) == b"0123"
    assert buffered.pending() == 6  # select would not see these: paho must not wait on it
    assert buffered.recv(100) == b"456789"  # never more than the buffer holds
    assert buffered.pending() == 0


def test_an_empty_socket_raises_as_before_and_a_closed_one_reads_empty(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = pair
    buffered = BufferedSocket(receiver)
    with pytest.raises(BlockingIOError):  # paho reads this as "nothing yet"
        buffered.recv(1)
    sender.sendall(b"x")
    sender.close()
    assert buffered.recv(1) == b"x"
    assert buffered.recv(1) == b""  # the peer closed: paho sees the connection lost


def test_everything_else_passes_to_the_socket(pair: tuple[socket.socket, socket.socket]) -> None:
    _, receiver = pair
    buffered = BufferedSocket(receiver)
    assert buffered.fileno() == receiver.fileno()
    assert raw_socket(buffered) is receiver
    assert raw_socket(receiver) is receiver


@pytest.fixture
def mosquitto() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()


@pytest.mark.integration
@pytest.mark.parametrize("version", [MQTT_V5, MQTT_V311])
def test_a_burst_arrives_whole_and_in_order_over_a_real_broker(mosquitto: BrokerHandle, version: str) -> None:
    got: queue.Queue[Message] = queue.Queue()
    n = 2000
    done = threading.Event()

    def on_message(message: Message) -> None:
        got.put(message)
        if got.qsize() == n:
            done.set()

    receiver = connect(
        mosquitto.url, "burst-rx", on_message=on_message, subscriptions=[("burst/#", 1)], protocol=version
    )
    sender = connect(mosquitto.url, "burst-tx", on_message=lambda m: None, protocol=version)
    try:
        assert isinstance(receiver._client, BufferedReadClient)
        sock = raw_socket(receiver._client.socket())
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # the wrapper hid it once
        for i in range(n):  # faster than the receiver reads: its buffer holds many at a time
            assert sender.publish(f"burst/{i % 3}", i.to_bytes(4, "big") + bytes(800), qos=1)
        assert done.wait(30), f"{got.qsize()} of {n} messages arrived"
        order = [int.from_bytes(got.get_nowait().payload[:4], "big") for _ in range(n)]
        assert order == list(range(n))
    finally:
        sender.close()
        receiver.close()
