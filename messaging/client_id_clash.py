"""Telling a fight over one MQTT client id from a failing network.

An anonymous client's id is its caller's (`dartfl-agent-<device>`), so two agents started with
one `--device` take the connection from each other, each reconnect closing the other's, for
as long as both run. A failing network fails the connect itself; connections the broker
closes soon after accepting them, again and again, are a clash (messaging.link logs it).
"""

from __future__ import annotations

import math
from typing import Final

from messaging.refusals import DROP_WINDOW_S, DROPS_IN_WINDOW

__all__ = ["CLASH_SAID_EVERY_S", "SHORT_CONNECTION_S", "ClientIdClash"]

# A connection the broker closes within this long of accepting it was "short": in a fight over
# one client id each side's lasts about one reconnect delay (RECONNECT_MIN_S to _MAX_S).
SHORT_CONNECTION_S: Final = 10.0
CLASH_SAID_EVERY_S: Final = 60.0  # the clash is said at most this often


class ClientIdClash:
    """Tells a fight over one client id from other lost connections: DROPS_IN_WINDOW
    connections within DROP_WINDOW_S, each closed by the broker within SHORT_CONNECTION_S of
    accepting it. Bookkeeping only; the caller passes the monotonic time."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._up_since: float | None = None  # when the current connection was accepted
        self._short: list[float] = []  # when recent short connections were closed
        self._said_at = -math.inf
        self._unsaid = 0  # short connections not yet counted in a line
        self.suspected = False

    def connected(self, now: float) -> None:
        self._up_since = now

    def closed(self, now: float) -> str | None:
        """A connection closed, not by us. None: not put down to a clash (log it as usual);
        else the line to log now, at most once per CLASH_SAID_EVERY_S, or "" (say nothing)."""
        up_since, self._up_since = self._up_since, None
        if up_since is None or now - up_since >= SHORT_CONNECTION_S:
            self._short.clear()  # a connection that lasted, or never came up: no fight
            self.suspected, self._unsaid = False, 0
            return None
        self._short = [t for t in self._short if now - t < DROP_WINDOW_S] + [now]
        self._unsaid += 1
        self.suspected = self.suspected or len(self._short) >= DROPS_IN_WINDOW
        if not self.suspected or now - self._said_at < CLASH_SAID_EVERY_S:
            return None if not self.suspected else ""
        self._said_at, count, self._unsaid = now, self._unsaid, 0
        return (
            f"the broker closed this connection {count} times, each within {SHORT_CONNECTION_S:.0f} s "
            f"of accepting it: another client is likely connected with the same client id "
            f"{self.client_id!r} (two agents started with the same --device, or two processes on one "
            "account), and each one's reconnect closes the other's connection; stop one of them "
            f"(said at most once in {CLASH_SAID_EVERY_S:.0f} s)"
        )
