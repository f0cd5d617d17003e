"""The replayer's resends: a request still unanswered a while after it was sent goes out again.

A request the client library took (QoS 1) can still be lost: a broker killed without
persistence loses what it had acknowledged and not yet delivered, and after it restarts,
what the requester's client sends before the device has subscribed again reaches nobody
(the agent's replies likewise, before the requester has). No client sees that happen. So a
request with no answer RESEND_AFTER_S (or four SLOs) after its last send is sent again, under
the same id, while the link is up, at most MAX_RESENDS times; the agent answers a copy with
the answer it already gave (edge_client.answered), so the requester still gets one answer per
request. Its latency runs from the first send.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from messaging.link import MqttLink

log = logging.getLogger(__name__)

__all__ = ["MAX_RESENDS", "RESEND_AFTER_S", "Resender"]

RESEND_AFTER_S = 5.0
MAX_RESENDS = 5
_SCAN_S = 0.5

# request index -> (topic, payload, content type), freshly encoded
Encode = Callable[[int], tuple[str, bytes, str | None]]


class Resender:
    """A thread that resends unanswered requests. `sent_s[i]` (NaN: not sent yet) is filled
    by the send loop; `unanswered()` returns a boolean mask over the requests."""

    def __init__(
        self,
        link: MqttLink,
        encode: Encode,
        sent_s: npt.NDArray[np.float64],
        unanswered: Callable[[], npt.NDArray[np.bool_]],
        clock: Callable[[], float],
        after_s: float = RESEND_AFTER_S,
    ) -> None:
        self._link = link
        self._encode = encode
        self._sent_s = sent_s
        self._unanswered = unanswered
        self._clock = clock
        self._after_s = after_s
        self._last_s = np.full(len(sent_s), np.nan)
        self._count = np.zeros(len(sent_s), dtype=np.int64)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resend", daemon=True)
        self.resent = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(_SCAN_S):
            if self._link.connected:  # sent while the link is down, it would race the device again
                self._resend_due()

    def _resend_due(self) -> None:
        last = np.fmax(self._sent_s, self._last_s)  # NaN only where never sent
        with np.errstate(invalid="ignore"):
            due = (self._clock() - last > self._after_s) & (self._count < MAX_RESENDS)
        for i in np.flatnonzero(due & self._unanswered()).tolist():
            topic, body, content_type = self._encode(i)
            if not self._link.publish(topic, body, qos=1, content_type=content_type):
                return  # its queue is full: next scan
            self._last_s[i] = self._clock()
            self._count[i] += 1
            self.resent += 1
        if self.resent and due.any():
            log.debug("resent %d unanswered requests so far", self.resent)
