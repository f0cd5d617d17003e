"""A pipe to read a trace from, as a shell's `<(...)` or `/dev/stdin` gives one."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["pipes"]


@contextmanager
def pipes() -> Iterator[Callable[[bytes], Path]]:
    """feed(data) -> a /dev/fd path whose reader gets `data`, written by a thread (data past the
    pipe's buffer would block a single thread); the read ends are closed on exit."""
    opened: list[int] = []

    def feed(data: bytes) -> Path:
        read_end, write_end = os.pipe()
        opened.append(read_end)

        def write() -> None:
            with os.fdopen(write_end, "wb") as out:
                out.write(data)

        threading.Thread(target=write, daemon=True).start()
        return Path(f"/dev/fd/{read_end}")

    try:
        yield feed
    finally:
        for fd in opened:
            os.close(fd)
