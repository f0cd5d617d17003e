"""When the agent republishes its retained status: the price a replay sizes its load by."""

from __future__ import annotations

import threading
from typing import Any

from dartfl.profiles import get_profile
from edge_client.agent_status import REPRICE_EVERY_S, StatusPublisher


class _Source:
    def __init__(self) -> None:
        self.price = (1e-3, 2e-3)

    def report(self) -> Any:
        return {"snapshot": True}

    def cost_profile(self) -> Any:
        return get_profile("pi4")

    def request_price(self) -> tuple[float, ...]:
        return self.price


class _Link:
    def __init__(self) -> None:
        self.statuses: list[Any] = []

    def status(self, status: Any) -> None:
        self.statuses.append(status)


def test_a_status_follows_a_price_that_moved_by_more_than_a_tenth_and_not_a_smaller_one() -> None:
    source, link, stop = _Source(), _Link(), threading.Event()
    now = [0.0]
    publisher = StatusPublisher("dev", source, stop, clock=lambda: now[0])
    publisher.status(link, online=True)  # type: ignore[arg-type]
    source.price = (1.05e-3, 2e-3)  # 5%: not worth a status
    publisher._republish_if_repriced(link)  # type: ignore[arg-type]
    assert len(link.statuses) == 1
    source.price = (1.05e-3, 2.5e-3)  # the second task's request 25% dearer
    publisher._republish_if_repriced(link)  # type: ignore[arg-type]
    assert len(link.statuses) == 2 and link.statuses[-1].online
    assert publisher.price == (1.05e-3, 2.5e-3)
    # Under load the price moves by a tenth from one snapshot to the next: one status in
    # REPRICE_EVERY_S at most (it went out about once a second).
    source.price = (2e-3, 4e-3)
    now[0] = REPRICE_EVERY_S - 1.0
    publisher._republish_if_repriced(link)  # type: ignore[arg-type]
    assert len(link.statuses) == 2
    now[0] = REPRICE_EVERY_S
    publisher._republish_if_repriced(link)  # type: ignore[arg-type]
    assert len(link.statuses) == 3 and publisher.price == (2e-3, 4e-3)
    now[0] = 2 * REPRICE_EVERY_S
    stop.set()  # stopping: "offline" must stand, whatever the price does
    source.price = (9e-3, 9e-3)
    publisher._republish_if_repriced(link)  # type: ignore[arg-type]
    assert len(link.statuses) == 3


def test_an_error_said_while_online_stands_in_every_later_online_status_not_in_the_offline_one() -> None:
    # A failed policy (docs/plugins.md): a reconnect or a new price must not drop the reason.
    source, link, stop = _Source(), _Link(), threading.Event()
    publisher = StatusPublisher("dev", source, stop)
    publisher.status(link, online=True)  # type: ignore[arg-type]
    publisher.status(link, online=True, error="policy 'x' failed")  # type: ignore[arg-type]
    publisher.republish_online(link)  # type: ignore[arg-type]
    source.price = (2e-3, 2e-3)
    publisher._republish_if_repriced(link)  # type: ignore[arg-type]
    publisher.status(link, online=False, error="the agent failed")  # type: ignore[arg-type]
    assert [s.error for s in link.statuses] == [
        None,
        "policy 'x' failed",
        "policy 'x' failed",
        "policy 'x' failed",
        "the agent failed",
    ]
