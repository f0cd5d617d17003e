"""Requests that must not break the agent for anyone else: a `sent_at` from a clock far ahead,
and a request id used again for another task or image. In-process, no broker."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest

from dartfl import protocol
from dartfl.executor import DeviceExecutor, RoundClock
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.types import TaskSpec
from edge_client.agent_ingress import QueuedRequest, admit_request
from edge_client.answered import RecentRequests
from edge_client.telemetry import RequestStats
from edge_client.transit import AHEAD_TOLERANCE_S, TransitClock
from messaging.link import Message

TASKS = {"digits": 0, "fashion": 1}
REPLY = "dartfl/v1/_reply/victim/x"
ZEROS = np.zeros((28, 28), dtype=np.uint8)
WHITE = np.full((28, 28), 255, dtype=np.uint8)


def _device(capacity: int = 64) -> DeviceExecutor[QueuedRequest]:
    tasks = [TaskSpec(name, 0.25, capacity) for name in TASKS]
    return DeviceExecutor(tasks, make_policy("dart"), get_profile("pi4"), RoundClock(60.0, 0))


def _request(task: str, request_id: str, image: np.ndarray = ZEROS, sent_at: float | None = None) -> Message:
    payload = protocol.encode_request(request_id, image, REPLY, sent_at=sent_at)
    return Message(f"dartfl/v1/dev1/req/{task}", payload, 1, False)


class Ingress:
    """admit_request with a device, stats, a request record and a transit clock; the replies
    sent at once are kept in `sent` as (topic, decoded reply)."""

    def __init__(self) -> None:
        self.device, self.stats = _device(), RequestStats()
        self.recent, self.transit = RecentRequests(), TransitClock()
        self.sent: list[tuple[str, dict[str, object]]] = []

    def __call__(self, message: Message) -> None:
        admit_request(
            message,
            TASKS,
            1 << 20,
            self.device.admit,
            self.stats,
            lambda topic, reply, _corr: self.sent.append((topic, json.loads(reply[0]))),
            recent=self.recent,
            transit=self.transit,
        )


# -- a sent_at ahead of the agent's clock ---------------------------------------------------------


def test_a_sent_at_far_ahead_is_not_believed_and_leaves_the_floor_alone() -> None:
    # The reviewer's case: one request dated now + 1e6 s took the floor to -1e6, so every later
    # request on that reply topic looked 1e6 s late and was refused for up to two minutes.
    clock = TransitClock(window_s=60.0)
    assert clock.waited_s("r", 999.999, 1000.0) == 0.0  # sets the floor: 1 ms
    assert clock.waited_s("r", 1001.0 + 1e6, 1001.0) == 0.0  # its own wait: unknown, not negative
    assert clock.waited_s("r", 1002.0, 1002.001) == 0.0  # the floor is still 1 ms
    assert clock.waited_s("r", 1003.0, 1003.501) == pytest.approx(0.5)  # and still times queueing
    assert clock.ahead == 1
    # Alone on a reply topic it does not set a floor either.
    assert clock.waited_s("new", 1004.0 + 1e6, 1004.0) == 0.0
    assert "new" not in clock._floors


def test_a_sent_at_within_the_skew_tolerance_still_counts() -> None:
    clock = TransitClock()
    ahead = AHEAD_TOLERANCE_S / 2  # a requester clock a little ahead of the agent's
    assert clock.waited_s("r", 1000.0 + ahead, 1000.0) == 0.0
    assert clock.waited_s("r", 1001.0 + ahead, 1001.3) == pytest.approx(0.3)
    assert clock.ahead == 0


def test_a_clock_ahead_is_said_once_a_window_not_once_a_request(caplog: pytest.LogCaptureFixture) -> None:
    clock = TransitClock(window_s=60.0)
    with caplog.at_level(logging.WARNING, logger="edge_client.transit"):
        for i in range(100):
            clock.waited_s("r", 1000.0 + i * 0.1 + 5.0, 1000.0 + i * 0.1)
        clock.waited_s("r", 1070.0 + 5.0, 1070.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and clock.ahead == 101
    assert "ahead of this agent's clock" in lines[0] and "'r'" in lines[0]


def test_after_a_request_from_the_future_the_reply_topic_is_served_as_before() -> None:
    # The ingress path: before the fix the five requests after "poison" were refused `queue-full`.
    ingress, now = Ingress(), time.time()
    for i in range(3):
        ingress(_request("digits", f"before-{i}", sent_at=now + i * 0.01))
    ingress(_request("digits", "poison", sent_at=time.time() + 1e6))
    for i in range(5):
        ingress(_request("digits", f"after-{i}", sent_at=time.time()))
    assert ingress.sent == [] and ingress.stats.rejected == 0
    assert ingress.device.backlog() == (9, 0)


# -- the same id for another task or image ---------------------------------------------------------


def test_the_same_id_on_another_task_is_a_new_request_not_a_copy() -> None:
    # The reviewer's case: dup-7 on digits, then dup-7 on fashion with another image, got the
    # digits answer back byte for byte.
    ingress = Ingress()
    ingress(_request("digits", "dup-7"))
    digits_answer = protocol.answer(False, "dup-7", "digits", 2, 3.0, 1)
    ingress.recent.answered(REPLY, "dup-7", digits_answer)
    ingress(_request("fashion", "dup-7", WHITE))
    assert ingress.sent == []  # not the digits answer: queued for the fashion model
    assert ingress.device.backlog() == (1, 1) and ingress.stats.requests == 2
    assert ingress.recent.duplicates == 0


def test_the_same_id_and_task_with_another_image_is_a_new_request() -> None:
    ingress = Ingress()
    ingress(_request("digits", "r1", ZEROS))
    ingress.recent.answered(REPLY, "r1", protocol.answer(False, "r1", "digits", 0, 3.0, 1))
    ingress(_request("digits", "r1", WHITE))  # a requester whose counter restarted
    assert ingress.sent == [] and ingress.device.backlog() == (2, 0)


def test_a_resend_after_a_lost_reply_still_gets_the_answer_already_sent() -> None:
    # A resend is encoded afresh (a new sent_at): the same request all the same.
    ingress = Ingress()
    ingress(_request("digits", "r1", WHITE, sent_at=time.time()))
    answer = protocol.answer(False, "r1", "digits", 7, 3.0, 1)
    ingress.recent.answered(REPLY, "r1", answer)
    ingress(_request("digits", "r1", WHITE, sent_at=time.time() + 0.05))
    assert ingress.sent == [(REPLY, json.loads(answer[0]))]
    assert ingress.device.backlog() == (1, 0) and ingress.stats.requests == 1
    assert ingress.recent.duplicates == 1


def test_answers_that_cannot_be_told_apart_are_not_kept() -> None:
    # Two different requests pending under one id: the executor names an answer by reply topic
    # and id only, so neither answer is kept and a copy of either is served again, never given
    # the other's answer.
    recent = RecentRequests()
    assert recent.take(REPLY, "r1", "digits", ZEROS) == (True, None)
    assert recent.take(REPLY, "r1", "fashion", WHITE) == (True, None)
    recent.answered(REPLY, "r1", protocol.answer(False, "r1", "fashion", 9, 3.0, 1))
    recent.answered(REPLY, "r1", protocol.answer(False, "r1", "digits", 2, 3.0, 1))
    assert recent.take(REPLY, "r1", "digits", ZEROS) == (True, None)  # served again
    # Once that one is answered, the record holds it alone and knows its answer.
    answer = protocol.answer(False, "r1", "digits", 2, 3.0, 1)
    recent.answered(REPLY, "r1", answer)
    assert recent.take(REPLY, "r1", "digits", ZEROS) == (False, answer)
    assert recent.take(REPLY, "r1", "fashion", WHITE) == (True, None)


# -- a retained request ---------------------------------------------------------------------------


def test_a_retained_request_is_dropped_not_served_again_at_every_resubscription() -> None:
    # The reviewer's case: a request published with the retain flag came back to the agent at
    # each restart (the broker hands retained messages to a new subscription), and was
    # answered and counted again each time. A live request never carries the flag.
    ingress = Ingress()
    payload = protocol.encode_request("ret", ZEROS, REPLY)
    ingress(Message("dartfl/v1/dev1/req/digits", payload, 1, True))
    assert ingress.device.backlog() == (0, 0) and ingress.sent == []
    assert ingress.stats.requests == 1 and ingress.stats.errors == 1
    ingress(Message("dartfl/v1/dev1/req/digits", payload, 1, False))
    assert ingress.device.backlog() == (1, 0)
