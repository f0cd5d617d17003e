"""How long a request waited on its way to the agent: its SLO runs from when it was sent.

When requests come faster than the agent's network thread takes them, they queue where the
agent cannot see them, in the broker and in the socket buffers. Timed from the moment the
agent reads it, a request that waited seconds there still looks fresh, so deadline
admission lets it in and the backlog outside only grows (issue 13: the README's width-1 replay
answered requests 22 s late and refused none). A request that carries `sent_at` (the
requester's clock, docs/protocol.md) says when it was sent; the agent's clock need not
agree with the requester's, so what counts is the transit beyond the fastest one seen from
that requester lately:

    waited = (received - sent_at) - min over the last WINDOW_S to 2 WINDOW_S of (received - sent_at)

The constant part of the transit (the clock offset and the network's own delay) cancels; what
is left is the queueing, which is what the SLO is about. The minimum is kept per requester
(its reply topic) in two windows of WINDOW_S, so a requester's clock that is stepped adapts
within 2 WINDOW_S; until then its requests look that much older or younger. Under sustained
overload the minimum does not creep up with the queue: the agent refuses what waited past its
SLO, so the requests that get through keep finding the queue short.

A `sent_at` ahead of the agent's clock by more than AHEAD_TOLERANCE_S is not believed: such a
request is timed from when the agent read it (its wait is unknown, as without `sent_at`) and
does not enter the floor. One request from a clock far ahead (a glitch, or anyone publishing with
a victim's reply topic) used to take the floor far below zero, so for up to 2 WINDOW_S every
later request on that reply topic looked as if it had waited that long and was refused. Within
the tolerance a lie still lowers the floor, by at most the tolerance. A requester's clock may
lag the agent's by any amount; one that leads it by more than the tolerance loses the transit
timing (its requests are timed as if they carried no `sent_at`), and the agent says so, once
a window.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Final

log = logging.getLogger(__name__)

__all__ = ["AHEAD_TOLERANCE_S", "REQUESTERS", "WINDOW_S", "TransitClock"]

WINDOW_S: Final = 60.0
REQUESTERS: Final = 1024  # requesters remembered; the one heard from least recently goes first
# How far a requester's clock may lead the agent's and still be believed. NTP keeps hosts within
# milliseconds on a LAN and tens of them over the internet; a lie within it costs a reply topic
# at most this much of its SLO (default 250 ms) for 2 WINDOW_S.
AHEAD_TOLERANCE_S: Final = 0.1


class TransitClock:
    """The queueing a request met on its way, per requester. Called on paho's one thread."""

    def __init__(self, window_s: float = WINDOW_S, capacity: int = REQUESTERS) -> None:
        self._window_s = window_s
        self._capacity = capacity
        # requester -> [window number, min transit in it, min transit in the window before]
        self._floors: OrderedDict[str, list[float]] = OrderedDict()
        self._said_ahead_at = -math.inf  # when a sent_at ahead of our clock was last logged
        self.ahead = 0  # requests whose sent_at was ahead of this agent's clock: not believed

    def waited_s(self, requester: str, sent_at: float | None, received_at: float) -> float:
        """Seconds the request waited beyond its requester's fastest recent transit; 0 when
        that is unknown: no `sent_at`, or one ahead of this agent's clock by more than
        AHEAD_TOLERANCE_S. Both times are wall-clock seconds: the requester's and this agent's."""
        if sent_at is None or not math.isfinite(sent_at):
            return 0.0
        transit = received_at - sent_at
        if transit < -AHEAD_TOLERANCE_S:
            self._not_believed(requester, -transit, received_at)
            return 0.0
        window = float(math.floor(received_at / self._window_s))
        floor = self._floors.get(requester)
        if floor is None:
            floor = self._floors[requester] = [window, transit, math.inf]
            while len(self._floors) > self._capacity:
                self._floors.popitem(last=False)
        else:
            self._floors.move_to_end(requester)
            if window != floor[0]:  # a new window: the last one's minimum becomes the old one
                floor[2] = floor[1] if window == floor[0] + 1 else math.inf
                floor[0], floor[1] = window, transit
            elif transit < floor[1]:
                floor[1] = transit
        return max(0.0, transit - min(floor[1], floor[2]))

    def _not_believed(self, requester: str, ahead_s: float, received_at: float) -> None:
        self.ahead += 1
        if abs(received_at - self._said_ahead_at) < self._window_s:
            return
        self._said_ahead_at = received_at
        log.warning(
            "a request on %r carries a sent_at %.3g s ahead of this agent's clock: timed from "
            "its arrival instead, and kept out of the transit floor (%d such so far; is a clock wrong?)",
            requester,
            ahead_s,
            self.ahead,
        )
