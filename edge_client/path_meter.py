"""What the network thread spends on each request, measured while the agent serves.

paho runs every message handler on its one network thread, so that thread's CPU clock
(`time.thread_time`) read at each handler's entry and exit splits its time in two: inside a
handler, decoding and admitting a request (the ingress); between the end of one handler and
the start of the next, everything else the thread does for the traffic: reading and parsing
the next packet, acknowledging it, handling the broker's acknowledgements of the replies
(docs/profiles.md, "The request path"). Under a burst both are larger than a calibration in
isolation measures (the issue 13 replay at width 1 priced a request at 227 us and spent 617),
so the agent prices a request by what it measures here, not only by the calibration.

The meter sums over `FLUSH_EVERY` requests and hands the sums over then: one lock taken per
that many requests, not per request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

__all__ = ["FLUSH_EVERY", "NetworkThreadMeter"]

FLUSH_EVERY = 64

# (requests, receive CPU seconds, ingress CPU seconds): the sums since the last hand-over.
Sink = Callable[[int, float, float], None]


class NetworkThreadMeter:
    """Times handlers on the network thread; `sink` receives the sums every FLUSH_EVERY
    requests, called holding `lock` (the agent's: the cost model is the executor's)."""

    __slots__ = ("_ingress_s", "_lock", "_mark_s", "_receive_s", "_requests", "_sink", "_thread")

    def __init__(self, sink: Sink, lock: AbstractContextManager[object]) -> None:
        self._sink, self._lock = sink, lock  # the sink is called holding `lock`
        self._thread: int | None = None  # the network thread the marks belong to
        self._mark_s = 0.0  # its CPU clock when the last handler returned
        self._requests, self._receive_s, self._ingress_s = 0, 0.0, 0.0

    def entered(self) -> float:
        """A handler starts on this thread: count what the thread did since the last one."""
        now = time.thread_time()
        thread = threading.get_ident()
        if thread != self._thread:  # the first message, or paho's thread was replaced (reconnect)
            self._thread = thread
        else:
            self._receive_s += max(0.0, now - self._mark_s)
        return now

    def left(self, entered_s: float) -> float:
        """The handler that started at `entered_s` (entered's value) returns; its CPU seconds."""
        self._mark_s = now = time.thread_time()
        spent = now - entered_s
        self._ingress_s += spent
        self._requests += 1
        if self._requests >= FLUSH_EVERY:
            with self._lock:
                self._sink(self._requests, self._receive_s, self._ingress_s)
            self._requests, self._receive_s, self._ingress_s = 0, 0.0, 0.0
        return spent
