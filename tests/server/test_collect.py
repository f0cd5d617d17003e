"""Collecting a round's replies (server.collect) against the in-memory grid's faults (issue 16).

A trivial ClientApp answers at once, so these run in about a second each; the waits they
check are seconds against a stalled pull of a minute (the grid's push session), so the
margins are wide.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import pytest
from flwr.app import Context, Error, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.app.message import make_message
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.constant import SYSTEM_MESSAGE_TYPE

from server.collect import RoundReplies, collect_replies
from server.local_grid import LocalGrid

echo = ClientApp()


@echo.train()
def _train(msg: Message, context: Context) -> Message:
    node = float(context.node_id)
    return Message(RecordDict({"metrics": MetricRecord({"node": node})}), reply_to=msg)


@pytest.fixture
def grid() -> Iterator[LocalGrid]:
    g = LocalGrid(echo, {10: {}, 11: {}}, {})
    g.offline_after_s = 1.0  # heartbeats missed (a real SuperLink: 40-60 s)
    g.session_ttl_s = 60.0  # a stalled pull blocks this long (a real SuperLink: 180 s)
    yield g
    g.close()


def _messages(nodes: Iterable[int] = (10, 11)) -> list[Message]:
    return [Message(RecordDict(), dst_node_id=n, message_type=MessageType.TRAIN, group_id="1") for n in nodes]


def _updates_from(replies: list[Message]) -> list[int]:
    return sorted(r.metadata.src_node_id for r in replies if not r.has_error())


def _updated(out: RoundReplies) -> list[int]:
    return sorted(node for node, r in out.replies if not r.has_error())


def test_flowers_send_and_receive_loses_the_survivor_behind_a_stalled_reply(grid: LocalGrid) -> None:
    # Why the round loop does not use it: the first pull gets only the half-uploaded reply of
    # the killed node and blocks on it past the timeout; the survivor's reply, stored on the
    # SuperLink meanwhile, is never pulled. The double must reproduce this for the tests below
    # to mean anything.
    grid.session_ttl_s = 2.0
    grid.kill(11, "uploading")
    grid.reply_after_s[10] = 0.3
    replies = list(grid.send_and_receive(_messages(), timeout=1.5))
    assert _updates_from(replies) == []
    assert [r.metadata.src_node_id for r in replies] == [11]
    assert "objects are unavailable" in replies[0].error.reason


def test_a_node_killed_while_uploading_costs_neither_the_survivors_update_nor_the_push_session(
    grid: LocalGrid,
) -> None:
    grid.kill(11, "uploading")
    grid.reply_after_s[10] = 0.3  # the survivor replies after the killed node's partial reply
    t0 = time.monotonic()
    out = collect_replies(grid, _messages(), timeout_s=30.0, poll_s=0.1)
    took_s = time.monotonic() - t0
    assert _updated(out) == [10]
    assert out.left == [11] and out.timed_out == []
    # Given up when it left the federation, not after the 60-s push session or the timeout.
    assert took_s < 10.0


def test_a_node_killed_while_training_is_given_up_once_it_leaves_the_federation(grid: LocalGrid) -> None:
    grid.kill(11, "training")
    t0 = time.monotonic()
    out = collect_replies(grid, _messages(), timeout_s=30.0, poll_s=0.1)
    assert _updated(out) == [10]
    # Either the round saw it go first, or it pulled the SuperLink's "Node Unavailable" reply.
    assert out.left == [11] or [node for node, r in out.replies if r.has_error()] == [11]
    assert time.monotonic() - t0 < 10.0


def test_a_listed_node_that_does_not_answer_is_given_up_at_the_timeout(grid: LocalGrid) -> None:
    grid.reply_after_s[11] = 120.0  # alive (heartbeats go on) but its reply never comes in time
    t0 = time.monotonic()
    out = collect_replies(grid, _messages(), timeout_s=1.0, poll_s=0.1)
    assert _updated(out) == [10]
    assert out.timed_out == [11] and out.left == []
    assert 1.0 <= time.monotonic() - t0 < 5.0


def test_every_reply_in_ends_the_round_at_once(grid: LocalGrid) -> None:
    t0 = time.monotonic()
    out = collect_replies(grid, _messages(), timeout_s=30.0, poll_s=0.1)
    assert _updated(out) == [10, 11]
    assert out.left == [] and out.timed_out == []
    assert time.monotonic() - t0 < 5.0


class _RefusingGrid(LocalGrid):
    """The SuperLink refuses the message to node 11 (it is no longer in the federation)."""

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = list(super().push_messages(messages))
        sent = self.sent[-len(ids) :]
        return ["" if m.metadata.dst_node_id == 11 else i for m, i in zip(sent, ids, strict=True)]


def test_a_message_the_superlink_refuses_counts_as_a_node_that_left() -> None:
    grid = _RefusingGrid(echo, {10: {}, 11: {}}, {})
    out = collect_replies(grid, _messages(), timeout_s=30.0, poll_s=0.1)
    assert _updated(out) == [10]
    assert out.left == [11]


class _SuperLinkErrorsGrid(LocalGrid):
    """Node 11's message is answered by an error the SuperLink made up, as HttpGrid's "objects
    unavailable" and the SuperLink's "Node Unavailable" are: it comes from the SuperLink's id."""

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        out = []
        for reply in super().pull_messages(message_ids):
            if reply.metadata.src_node_id == 11:
                meta = Metadata(
                    run_id=1, message_id="", src_node_id=SUPERLINK_NODE_ID, dst_node_id=SUPERLINK_NODE_ID,
                    reply_to_message_id=reply.metadata.reply_to_message_id, group_id="", created_at=0.0,
                    ttl=0.0, message_type=SYSTEM_MESSAGE_TYPE,
                )  # fmt: skip
                reply = make_message(metadata=meta, error=Error(code=5, reason="Node Unavailable"))
            out.append(reply)
        return out


def test_an_error_the_superlink_made_up_is_put_down_to_the_node_it_answers() -> None:
    # The round's warnings used to say "node 1 failed": the SuperLink's own id.
    grid = _SuperLinkErrorsGrid(echo, {10: {}, 11: {}}, {})
    out = collect_replies(grid, _messages(), timeout_s=30.0, poll_s=0.1)
    assert sorted((node, r.has_error()) for node, r in out.replies) == [(10, False), (11, True)]
