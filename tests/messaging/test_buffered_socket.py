"""Reads served from a buffer (messaging.buffered_socket): the bytes paho asks for, in order,
from one system call, and nothing stranded in the buffer. A burst over a real broker:
tests/messaging/test_lean_client.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from messaging.buffered_socket import BufferedSocket, raw_socket


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
