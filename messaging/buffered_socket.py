"""Reading MQTT packets from memory instead of one system call per header byte.

paho reads each packet's fixed header a byte at a time (`recv(1)` for the command, one more
for each byte of the remaining length, then the body): three or four system calls for every
message, plus a `select` before each packet, since its loop reads one packet per wake-up.
At a few thousand requests a second that is most of what the network thread does besides
running Python (benchmarks/request_path.py; docs/benchmarks.md, "The request path").

`BufferedSocket` takes what the kernel holds in one `recv` and hands paho the bytes it asks
for from memory. paho already asks a socket for `pending()` bytes (TLS sockets keep
decrypted bytes the kernel no longer shows to `select`) and skips its wait while there are
any, so buffered bytes are never stranded; `LeanClient.loop_read` (messaging.lean_client)
goes on reading while whole packets sit in the buffer, so one wake-up serves them all.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["READ_BYTES", "BufferedSocket", "raw_socket"]

# One read takes up to this much: some 70 requests of 800 bytes, a burst's worth.
READ_BYTES: Final = 65536


class BufferedSocket:
    """A connected socket (plain, TLS or paho's websocket wrapper) whose reads are served
    from one buffer; everything else passes through to it."""

    __slots__ = ("_at", "_buffer", "raw")

    def __init__(self, sock: Any) -> None:
        self.raw = sock  # what paho created; `on_socket_open` handlers may need it (TCP options)
        self._buffer = b""
        self._at = 0

    def recv(self, size: int) -> bytes:
        if self._at >= len(self._buffer):
            # Raises as the socket does when it has nothing (BlockingIOError, SSLWantReadError).
            data: bytes = self.raw.recv(max(size, READ_BYTES))
            if not data:
                return data  # the peer closed the connection: paho sees b"" as before
            self._buffer, self._at = data, 0
        start = self._at
        self._at = end = min(start + size, len(self._buffer))
        return self._buffer[start:end]

    def buffered(self) -> int:
        """Bytes read from the kernel and not yet handed to paho."""
        return len(self._buffer) - self._at

    def pending(self) -> int:
        inner = getattr(self.raw, "pending", None)
        return self.buffered() + (inner() if inner is not None else 0)

    def __getattr__(self, name: str) -> Any:  # send, fileno, setblocking, close, ...
        return getattr(self.raw, name)


def raw_socket(sock: Any) -> Any:
    """The socket under a BufferedSocket (or `sock` itself)."""
    return sock.raw if isinstance(sock, BufferedSocket) else sock
