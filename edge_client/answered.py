"""The requests an agent has taken lately, so that one delivered twice is answered once.

MQTT's QoS 1 delivers a request at least once: paho sends again what the broker had not
acknowledged when a connection dropped, and a requester resends what stays unanswered after a
broker outage (orchestration.replay), since a broker that restarts without persistence loses
what it held and no client can tell which. A request comes back under the same id on the same
reply topic. If the agent still holds it (queued or in a batch), the copy is dropped: the
reply is on its way. If it was answered, the copy gets the same answer again, without running
the model a second time, so the requester sees one answer per request whatever reaches it.

The record is bounded (RECENT entries, oldest forgotten first): a copy of a request older than
that is served again. It lives in memory, so a restarted agent has forgotten it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from dartfl import protocol

__all__ = ["RECENT", "RecentRequests"]

RECENT: Final = 20_000  # about 10 MB (measured: 0.5 KB a request); at 300 requests/s, the last minute


Key = tuple[str, str]  # (reply topic, request id)


class RecentRequests:
    """The last RECENT requests taken, each pending (None) or with its answer (payload,
    content type; the copy's own correlation data goes with it). Thread-safe:
    paho's thread takes requests, the executor answers them."""

    def __init__(self, capacity: int = RECENT) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[Key, protocol.Encoded | None] = OrderedDict()
        self._lock = threading.Lock()
        self.duplicates = 0  # copies dropped or answered again

    def take(self, reply_to: str, request_id: str) -> tuple[bool, protocol.Encoded | None]:
        """(True, None) for a request not seen before (now pending); (False, its answer or None
        while it is pending) for a copy."""
        key = (reply_to, request_id)
        with self._lock:
            if key in self._seen:
                self.duplicates += 1
                return False, self._seen[key]
            self._seen[key] = None
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return True, None

    def answered(self, reply_to: str, request_id: str, answer: protocol.Encoded) -> None:
        key = (reply_to, request_id)
        with self._lock:
            if key in self._seen:  # not forgotten meanwhile
                self._seen[key] = answer
