"""The agent's ingress and its request statistics, in-process (no broker): what each kind of
message is answered with, and how rejections count."""

from __future__ import annotations

import json
import time

import numpy as np

from dartfl import protocol
from dartfl.executor import DeviceExecutor, RoundClock
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.types import TaskSpec
from edge_client.agent_ingress import QueuedRequest, admit_request
from edge_client.answered import RecentRequests
from edge_client.telemetry import RequestStats
from edge_client.transit import TransitClock
from messaging.link import Message

TASKS = {"digits": 0, "fashion": 1}
REPLY = "dartfl/v1/_reply/tester"


def _device(capacity: int) -> DeviceExecutor[QueuedRequest]:
    tasks = [TaskSpec(name, 0.25, capacity) for name in TASKS]
    return DeviceExecutor(tasks, make_policy("dart"), get_profile("pi4"), RoundClock(60.0, 0))


def _admit(
    message: Message,
    device: DeviceExecutor[QueuedRequest],
    stats: RequestStats,
    reply_rule: protocol.ReplyTopicRule = "requester",
    recent: RecentRequests | None = None,
    transit: TransitClock | None = None,
) -> list[tuple[str, dict]]:
    """The replies sent at once, as (topic, decoded reply)."""
    sent: list[tuple[str, dict]] = []
    admit_request(
        message,
        TASKS,
        1 << 20,
        device.admit,
        stats,
        lambda topic, reply, _corr: sent.append((topic, json.loads(reply[0]))),
        reply_rule=reply_rule,
        recent=recent,
        transit=transit,
    )
    return sent


def _reflecting(reply_to: str, task: str = "digits") -> Message:
    """A request asking for its reply on `reply_to`, bypassing the encoder's own rule."""
    obj = json.loads(protocol.encode_request("r1", np.zeros((28, 28), dtype=np.uint8), REPLY))
    obj["reply_to"] = reply_to
    return Message(f"dartfl/v1/dev1/req/{task}", json.dumps(obj).encode(), 1, False)


def _request(task: str, request_id: str = "r1", sent_at: float | None = None) -> Message:
    image = np.zeros((28, 28), dtype=np.uint8)
    payload = protocol.encode_request(request_id, image, REPLY, sent_at=sent_at)
    return Message(f"dartfl/v1/dev1/req/{task}", payload, 1, False)


def test_an_empty_task_level_gets_an_unknown_task_reply() -> None:
    # `dartfl/v1/dev1/req/` matches the agent's `req/+`; it used to be dropped silently.
    device, stats = _device(4), RequestStats()
    image = np.zeros((28, 28), dtype=np.uint8)
    message = Message("dartfl/v1/dev1/req/", protocol.encode_request("r1", image, REPLY), 1, False)
    (topic, body), *rest = _admit(message, device, stats)
    assert not rest and topic == REPLY
    assert body["status"] == "error" and body["code"] == "unknown-task" and body["id"] == "r1"


def test_a_bad_request_is_never_answered_on_a_response_topic_the_decoder_refused() -> None:
    # An MQTT 5 Response Topic naming another device's request topic: the error reply must not
    # be published there (protocol.md), even though the payload gives no other address.
    device, stats = _device(4), RequestStats()
    message = Message(
        "dartfl/v1/dev1/req/digits", b"not json", 1, False, response_topic="dartfl/v1/dev2/req/digits"
    )
    assert _admit(message, device, stats) == []
    assert stats.errors == 1
    good = Message("dartfl/v1/dev1/req/digits", b"not json", 1, False, response_topic=REPLY)
    assert [topic for topic, _ in _admit(good, device, stats)] == [REPLY]


def test_a_reply_topic_outside_the_reply_namespace_gets_nothing_published_and_counts_an_error() -> None:
    # Reply reflection: any requester could have the device publish onto any topic it may write.
    device, stats = _device(4), RequestStats()
    for topic in ("alerts/door", "dartfl/v1/replay/3f9a/reply"):
        assert _admit(_reflecting(topic), device, stats) == []
        assert _admit(_reflecting(topic, task="cifar"), device, stats) == []  # not even an error reply
    assert stats.errors == 4 and device.backlog() == (0, 0)


def test_the_any_reply_rule_still_answers_old_requesters() -> None:
    device, stats = _device(1), RequestStats()
    _admit(_reflecting("app/replies"), device, stats, reply_rule="any")  # queued
    (topic, body), *_ = _admit(_reflecting("app/replies"), device, stats, reply_rule="any")
    assert topic == "app/replies" and body["reason"] == "queue-full"


def test_rejections_are_misses_of_the_window_but_have_no_latency() -> None:
    # A device rejecting 194 of 200 requests reported SLO attainment 1.0.
    device, stats = _device(2), RequestStats()
    replies = [_admit(_request("digits", f"r{i}"), device, stats) for i in range(5)]
    assert [len(r) for r in replies] == [0, 0, 1, 1, 1]  # capacity 2, then queue-full
    assert all(r[0][1]["status"] == "rejected" and r[0][1]["reason"] == "queue-full" for r in replies[2:])
    now = max(e[0] for e in stats._events)
    stats.answered_batch(now, [0.010, 0.020], slo_s=0.25)
    window = stats.window(now)
    assert window.rejected == 3 and window.replies == 2
    assert window.slo_attainment == 2 / 5
    assert window.p99_ms is not None and window.p99_ms <= 20.0


def test_a_window_of_only_rejections_has_attainment_zero_and_no_percentiles() -> None:
    stats = RequestStats()
    stats.rejected_now(5.0)
    stats.rejected_now(5.0, 3)  # the queue's leftovers at shutdown, at once
    window = stats.window(5.0)
    assert window.rejected == 4 and len(stats._events) == 4
    assert window.slo_attainment == 0.0 and window.p50_ms is None


def test_a_request_delivered_twice_is_taken_once_and_a_copy_of_an_answered_one_gets_its_answer() -> None:
    # After a broker outage the requester resends what stays unanswered (orchestration.resend):
    # without the record the agent ran and answered it twice.
    device, stats, recent = _device(4), RequestStats(), RecentRequests()
    sent: list[tuple[str, dict]] = []

    def admit(message: Message) -> None:
        sent.extend(_admit(message, device, stats, recent=recent))

    admit(_request("digits", "a"))
    admit(_request("digits", "a"))  # still queued: dropped, its reply is on its way
    assert stats.requests == 1 and sent == [] and device.backlog() == (1, 0)
    answer = protocol.answer(False, "a", "digits", 7, 12.0, 3)
    recent.answered(REPLY, "a", answer)  # what the executor does as it replies
    admit(_request("digits", "a"))
    assert sent == [(REPLY, json.loads(answer[0]))] and stats.requests == 1
    assert device.backlog() == (1, 0) and recent.duplicates == 2


def test_the_request_record_is_bounded_and_forgets_the_oldest_first() -> None:
    recent = RecentRequests(capacity=2)
    image = np.zeros((28, 28), dtype=np.uint8)
    assert [recent.take(REPLY, i, "digits", image)[0] for i in ("a", "b", "c")] == [True, True, True]
    assert recent.take(REPLY, "a", "digits", image) == (True, None)  # forgotten: served again
    assert recent.take(REPLY, "c", "digits", image) == (False, None)
    assert recent.take("dartfl/v1/_reply/other", "c", "digits", image)[0]  # another requester's id is its own


def test_a_request_that_waited_past_its_slo_on_its_way_is_refused_at_once() -> None:
    # Issue 13: requests that queued in the broker behind a flooded network thread looked fresh
    # when read, were admitted, and were answered seconds late. The requester's clock is 500 s
    # off the agent's: only the transit beyond its fastest one counts.
    device, stats, transit = _device(8), RequestStats(), TransitClock()
    now = time.time()
    skew = -500.0
    fresh = _admit(_request("digits", "a", sent_at=now + skew), device, stats, transit=transit)
    assert fresh == [] and device.backlog() == (1, 0)  # sets the floor; queued
    late = _request("digits", "b", sent_at=now + skew - 1.0)  # sent 1 s before the fresh one
    (topic, body), *rest = _admit(late, device, stats, transit=transit)
    assert not rest and topic == REPLY and body["status"] == "rejected" and body["id"] == "b"
    assert device.backlog() == (1, 0) and stats.rejected == 1
    # Without sent_at, or without the clock, the same request is timed from when it was read.
    assert _admit(_request("digits", "c", sent_at=now + skew - 1.0), device, stats) == []
    assert _admit(_request("digits", "d"), device, stats, transit=transit) == []
    assert device.backlog() == (3, 0)
