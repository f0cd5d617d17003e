"""A link's subscriptions: the standing ones, which it subscribes again on every connect (one
SUBSCRIBE for them all), and which SUBACK answers which SUBSCRIBE, the connect's or that of a
`MqttLink.subscribe()` waiting for its answer.

Not thread-safe on its own: the link calls it with its condition's lock held, the lock that
paho's callbacks take too."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from messaging.refusals import Refusal

__all__ = ["Subscriptions"]


class Subscriptions:
    def __init__(self, standing: Sequence[tuple[str, int]]) -> None:
        self.standing: dict[str, int] = dict(standing)  # topic -> QoS, kept across reconnects
        self._initial_mid: int | None = None  # the connect's SUBSCRIBE
        self._initial_topics: list[str] = []
        self._acked: dict[int, Refusal | None] = {}  # mid -> what was refused, for subscribe()
        self._pending: dict[int, str] = {}  # mid -> topic of a subscribe() not yet answered

    def subscribed_on_connect(self, mid: int | None, topics: list[str]) -> None:
        self._initial_mid, self._initial_topics = mid, topics

    def answered(self, mid: int) -> tuple[bool, list[str]]:
        """Whether SUBACK `mid` answers the connect's SUBSCRIBE, and the topics it answers."""
        initial = mid == self._initial_mid
        return initial, self._initial_topics if initial else [self._pending.get(mid, "?")]

    def acked(self, mid: int, refusal: Refusal | None) -> None:
        """A `subscribe()`'s answer, for the call waiting on it."""
        self._acked[mid] = refusal

    def sent(self, mid: int | None, topic: str) -> None:
        """A `subscribe()`'s SUBSCRIBE went out as `mid` (None: it did not)."""
        if mid is not None:
            self._pending[mid] = topic

    def wait_ack(self, cond: threading.Condition, mid: int, timeout: float) -> tuple[bool, Refusal | None]:
        """Wait (holding `cond`) for SUBACK `mid`: whether it came, and what it refused."""
        answered = cond.wait_for(lambda: mid in self._acked, timeout)
        refusal = self._acked.pop(mid, None)
        self._pending.pop(mid, None)
        return answered, refusal
