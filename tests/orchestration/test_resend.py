"""The replayer's resends (orchestration.resend), on a fake link and a fake clock."""

from __future__ import annotations

from typing import Any

import numpy as np

from orchestration.resend import MAX_RESENDS, Resender


class _Link:
    def __init__(self) -> None:
        self.connected = True
        self.published: list[str] = []

    def publish(self, topic: str, body: bytes, qos: int = 1, **_: Any) -> bool:
        self.published.append(topic)
        return True


def test_only_requests_unanswered_past_the_delay_go_out_again_while_the_link_is_up() -> None:
    link, now = _Link(), [0.0]
    sent = np.array([0.0, 1.0, np.nan, 0.5])  # request 2 not sent yet
    unanswered = np.array([True, True, True, False])  # request 3 answered
    resender = Resender(
        link,  # type: ignore[arg-type]
        lambda i: (f"req/{i}", b"", None),
        sent,
        lambda: unanswered,
        lambda: now[0],
        after_s=5.0,
    )
    now[0] = 5.5
    resender._resend_due()
    assert link.published == ["req/0"]  # 1 was sent 4.5 s ago; 2 never; 3 answered
    now[0] = 6.5
    resender._resend_due()
    assert link.published == ["req/0", "req/1"]  # and 0 not again before another 5 s
    for _ in range(3 * MAX_RESENDS):
        now[0] += 6.0
        resender._resend_due()
    assert link.published.count("req/0") == MAX_RESENDS and resender.resent == 2 * MAX_RESENDS
