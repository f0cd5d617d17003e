"""What the broker refused a client, said in one line naming the account, the topic and the fix.

A broker says no in two ways:
- a SUBACK failure code (>= 0x80: 0x87 Not authorized under MQTT 5, 0x80 under 3.1.1) for a
  subscription it refuses. Brokers that check subscriptions against their ACL do (Mosquitto's
  dynamic-security plugin, most other brokers). Mosquitto's `acl_file` does not: it grants every
  subscription and then drops, silently, each message the account may not read; readers find
  out by absence (`dartfl record`, `edge replay`), with the same hint.
- a PUBACK reason code >= 0x80 (MQTT 5 only) for a QoS 1 publish: Mosquitto answers 0x87 Not
  authorized when its ACL denies the write. Under MQTT 3.1.1 it acknowledges and drops.

`PublishRefusals` keeps the topic of each QoS > 0 publish in flight (MQTT 5 only) so that a
refused one can be named; paho only reports its message id.

A broker also closes a connection when another client connects with the same client id: with
client ids bound to accounts, two processes on one account close each other's connection,
over and over. MQTT 5 allows a DISCONNECT saying so (0x8E Session taken over); Mosquitto 2.0.11
just closes the socket. `Drops` notices either and says what is likely going on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from messaging.accounts import grant_hint

log = logging.getLogger(__name__)

__all__ = ["Drops", "PublishRefusals", "Refusal", "refused_subscription"]

# Publishes in flight whose topic is kept; beyond it the oldest are forgotten (a broker that
# never acknowledges must not grow this).
MAX_TRACKED: Final = 4096
MAX_TOPICS_LOGGED: Final = 20  # refused topics logged one by one, then only counted
SESSION_TAKEN_OVER: Final = 0x8E  # MQTT 5 DISCONNECT: another client connected with this id
# This many lost connections within the window look like a fight over one client id.
DROPS_IN_WINDOW: Final = 3
DROP_WINDOW_S: Final = 30.0


@dataclass(frozen=True)
class Refusal:
    """The broker refused `account` to read (subscribe) or write (publish) `topic`."""

    action: Literal["subscribe", "publish"]
    topic: str
    reason: str
    account: str | None

    def __str__(self) -> str:
        who = f"account {self.account!r}" if self.account else "an anonymous client"
        verb = "the subscription to" if self.action == "subscribe" else "the publish to"
        right: Literal["read", "write"] = "read" if self.action == "subscribe" else "write"
        return (
            f"the broker refused {who} {verb} {self.topic!r} ({self.reason}): its ACL must let "
            f"{who} {right} it; {grant_hint(right, self.topic, self.account)}"
        )


def refused_subscription(
    topics: Sequence[str], reasons: Sequence[Any], account: str | None
) -> Refusal | None:
    """The first refused topic of one SUBACK (its reason codes are in the order subscribed)."""
    for topic, reason in zip(topics, reasons, strict=False):
        if reason.is_failure:
            return Refusal("subscribe", topic, str(reason), account)
    return None


class PublishRefusals:
    """The refused publishes of one MQTT 5 link: the first one, and how many so far."""

    def __init__(self, label: str, account: str | None) -> None:
        self._label = label
        self._account = account
        self._lock = threading.Lock()
        self._in_flight: OrderedDict[int, str] = OrderedDict()
        self._early: OrderedDict[int, Any] = OrderedDict()  # refused before sent() saw the id
        self._logged: set[str] = set()
        self.first: Refusal | None = None
        self.count = 0

    def sent(self, mid: int, topic: str) -> None:
        """A QoS > 0 publish left with message id `mid` (called after paho's publish returns)."""
        with self._lock:
            reason = self._early.pop(mid, None)
            if reason is None:
                self._in_flight[mid] = topic
                if len(self._in_flight) > MAX_TRACKED:
                    self._in_flight.popitem(last=False)
                return
        self._refused(topic, reason)

    def acked(self, mid: int, reason: Any) -> None:
        """paho's on_publish (network thread). It may come before `sent`: paho calls it with
        its own lock held, so `publish` cannot hold ours across paho's call to close the gap."""
        failed = bool(getattr(reason, "is_failure", False))
        with self._lock:
            topic = self._in_flight.pop(mid, None)
            if topic is None:
                if failed:
                    self._early[mid] = reason
                    if len(self._early) > MAX_TRACKED:
                        self._early.popitem(last=False)
                return
        if failed:
            self._refused(topic, reason)

    def _refused(self, topic: str, reason: Any) -> None:
        refusal = Refusal("publish", topic, str(reason), self._account)
        with self._lock:
            self.count += 1
            if self.first is None:
                self.first = refusal
            say = topic not in self._logged and len(self._logged) < MAX_TOPICS_LOGGED
            if say:
                self._logged.add(topic)
        if say:
            log.error("%s: %s", self._label, refusal)


class Drops:
    """The connections a link lost: a takeover, or a run of them, is said as an error."""

    def __init__(self, label: str, account: str | None) -> None:
        self._label = label
        self._account = account
        self._lock = threading.Lock()
        self._times: list[float] = []

    def lost(self, reason: Any) -> bool:
        """One lost connection (paho's thread); True when it was said as an error."""
        now = time.monotonic()
        with self._lock:
            self._times = [t for t in self._times if now - t < DROP_WINDOW_S] + [now]
            many = len(self._times) >= DROPS_IN_WINDOW
            if many:
                self._times.clear()  # once per run of drops
        if getattr(reason, "value", None) == SESSION_TAKEN_OVER:
            why = f"another client connected as {self._account!r} and the broker closed this connection"
        elif many:
            suspect = f"is another process logged in as {self._account!r}, or " if self._account else ""
            why = (
                f"the broker closed this connection {DROPS_IN_WINDOW} times within {DROP_WINDOW_S:.0f} s: "
                f"{suspect}is the network failing?"
            )
        else:
            return False
        log.error("%s: %s; one account is one connection (docs/deployment.md section 5)", self._label, why)
        return True
