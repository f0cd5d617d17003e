"""What the device agent says about itself, and when: its retained status (online at the start
and after each reconnect, again when what a request costs has moved, offline with the final
report at the end) and its telemetry snapshot at a fixed rate, on a thread of its own (QoS 1).

`StatusPublisher` keeps the price the last status said; what it publishes comes from the
agent (`StatusSource`), through the agent's `DeviceLink`."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from dartfl.protocol import DeviceStatus, FinalReport, Telemetry
from dartfl.types import DeviceProfile

if TYPE_CHECKING:
    from edge_client.agent_link import DeviceLink

log = logging.getLogger(__name__)

__all__ = ["PAYLOADS", "REPRICE", "REPRICE_EVERY_S", "StatusPublisher", "StatusSource"]

PAYLOADS = ("json", "binary")  # the request forms the agent decodes, advertised in its status
REPRICE = 0.1  # a change of a request's price that is worth a new status
# At most one such status this often: under load the measured price moves by a tenth from one
# telemetry snapshot to the next, and the retained status (with its whole profile) went out
# about once a second (a review counted 37 in 100 s).
REPRICE_EVERY_S = 30.0


class StatusSource(Protocol):
    """What the publisher reads of the agent (each takes the agent's lock itself)."""

    def report(self) -> Telemetry: ...

    def cost_profile(self) -> DeviceProfile: ...

    def request_price(self) -> tuple[float, ...]: ...


class StatusPublisher:
    """The agent's retained status and its telemetry loop, on one device's link."""

    def __init__(
        self,
        device_id: str,
        source: StatusSource,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.device_id = device_id
        self._clock = clock
        self._repriced_at = -math.inf  # when the price last brought a new status
        self.source = source
        self.stop = stop  # set once the agent stops: "offline" must stand from then on
        self.price: tuple[float, ...] | None = None  # per-request costs the status last said
        self.standing_error: str | None = None  # what an online device keeps saying (a failed policy)

    def status(
        self, link: DeviceLink, *, online: bool, report: FinalReport | None = None, error: str | None = None
    ) -> None:
        """The retained status: online/offline, the cost profile (and the final report). An
        error said while online stands in every later online status."""
        if online:
            self.standing_error = error = error or self.standing_error
        self.price = self.source.request_price()
        source = self.source
        link.status(
            DeviceStatus(self.device_id, online, time.time(), source.cost_profile(), report, error, PAYLOADS)
        )

    def republish_online(self, link: DeviceLink) -> None:
        """After a reconnect (paho's thread); not once stopping, when "offline" must stand."""
        if not self.stop.is_set():
            self.status(link, online=True)

    def start_telemetry(self, link: DeviceLink, period_s: float) -> threading.Thread:
        loop = self._telemetry_loop
        thread = threading.Thread(target=loop, args=(link, period_s), name="telemetry", daemon=True)
        thread.start()
        return thread

    def _telemetry_loop(self, link: DeviceLink, period_s: float) -> None:
        while not self.stop.wait(period_s):
            try:
                link.telemetry(self.source.report())
                self._republish_if_repriced(link)
            except Exception:  # a broken link must not kill the device; paho reconnects
                log.exception("telemetry publish failed")

    def _republish_if_repriced(self, link: DeviceLink) -> None:
        """A new retained status when what a request costs has moved by REPRICE since the last:
        a replayer sizes `--target-load` from the status, so it must not keep the start's guess."""
        now = self._clock()
        if now - self._repriced_at < REPRICE_EVERY_S:
            return
        price = self.source.request_price()
        last = self.price
        if last is None or any(abs(p - q) > REPRICE * q for p, q in zip(price, last, strict=True)):
            self._repriced_at = now
            self.republish_online(link)
