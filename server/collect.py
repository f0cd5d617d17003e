"""Collecting one round's replies from Flower's Grid, so that no node can hold up the others.

Why not Flower's `Grid.send_and_receive` (issue 16): it pulls every outstanding reply in one
`pull_messages` call and checks its timeout only between calls. HttpGrid's `pull_messages`
downloads each reply's objects before it returns, retrying an object the sender has not
uploaded yet until the SuperLink's object-push session expires
(`flwr.supercore.constant.OBJECT_PUSH_SESSION_TTL_SECONDS`, 180 s after the sender's last
stored object). A SuperNode killed while uploading its reply leaves such a reply behind: the
call blocked for ~180 s, after that the round's timeout had passed, and the replies of the
other nodes, already stored on the SuperLink, were never pulled; the round aggregated nothing.

So each node's reply is pulled on its own daemon thread (a stuck download stalls only its own
node), and the round's thread decides when to stop waiting for a node:
1. its reply is in (an update, or an error reply such as Flower's "Node Unavailable");
2. it left the federation: the SuperLink no longer lists it because it missed its heartbeats.
   Flower itself then answers for such a node with an error; we also abandon a pull stuck on
   the half-uploaded reply it left behind, instead of waiting out the push session;
3. the round's timeout passed.
An abandoned thread ends when its download does (the push session's expiry at the latest);
what it brings back is dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from flwr.app import Message

__all__ = ["POLL_S", "CollectingGrid", "RoundReplies", "collect_replies"]

log = logging.getLogger(__name__)

# How often a node's reply is polled for, and the federation checked. Flower's HttpGrid polls
# every 3 s; one request per node and second is cheap on a SuperLink and shortens a round by
# ~1 s on average.
POLL_S = 1.0


class CollectingGrid(Protocol):
    """What collecting needs of Flower's Grid (HttpGrid in deployment, server.local_grid in tests)."""

    def get_node_ids(self) -> Iterable[int]: ...

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]: ...

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]: ...


@dataclass(frozen=True)
class RoundReplies:
    """The replies of one round, and the nodes given up before they replied."""

    # (node, its reply: an update or an error), in the order the messages were sent. The node
    # is the message's destination: an error the SuperLink or HttpGrid made up for a node comes
    # from the SuperLink's own node id.
    replies: list[tuple[int, Message]]
    # Left the federation (missed heartbeats) before their reply was in, or before their
    # message was (the SuperLink refuses a message to a node it no longer has).
    left: list[int]
    timed_out: list[int]  # still listed, but no reply within the round's timeout


class _ReplyPuller:
    """Polls for the reply to one message on a daemon thread until it is in or cancelled.

    `cancel()` freezes `reply`: a reply that comes later is dropped, so the round's thread
    reads a settled value."""

    def __init__(
        self, grid: CollectingGrid, message_id: str, node: int, poll_s: float, arrived: threading.Event
    ) -> None:
        self.node = node
        self._reply: Message | None = None
        self._grid, self._message_id, self._poll_s = grid, message_id, poll_s
        self._arrived = arrived
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._done = threading.Event()
        threading.Thread(target=self._run, name=f"reply-{node}", daemon=True).start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def reply(self) -> Message | None:
        with self._lock:
            return self._reply

    def cancel(self) -> None:
        with self._lock:
            self._cancelled.set()

    def _run(self) -> None:
        try:
            while not self._cancelled.is_set():
                replies = list(self._grid.pull_messages([self._message_id]))
                if replies:
                    with self._lock:
                        if self._cancelled.is_set():
                            log.info("node %s: its reply came after it was given up; dropped", self.node)
                        else:
                            self._reply = replies[0]
                    return
                self._cancelled.wait(self._poll_s)
        except Exception as exc:  # a thread must report what ends it, not die silently
            # HttpGrid retries transport errors itself; what reaches here is permanent.
            log.warning("node %s: pulling its reply failed (%s: %s)", self.node, type(exc).__name__, exc)
        finally:
            self._done.set()
            self._arrived.set()


def collect_replies(
    grid: CollectingGrid, messages: Sequence[Message], *, timeout_s: float, poll_s: float = POLL_S
) -> RoundReplies:
    """Push `messages` (one per node) and gather their replies, giving up on a node as the
    module docstring says; returns within `timeout_s` plus one poll."""
    pushed = set(grid.push_messages(messages))  # the grids set each message's id in place
    deadline = time.monotonic() + timeout_s
    arrived = threading.Event()
    pullers: list[_ReplyPuller] = []
    refused = []
    for msg in messages:
        node, message_id = msg.metadata.dst_node_id, msg.metadata.message_id
        if message_id and message_id in pushed:
            pullers.append(_ReplyPuller(grid, message_id, node, poll_s, arrived))
        else:
            log.warning("node %s: the SuperLink refused its message (no longer in the federation)", node)
            refused.append(node)

    waiting = {p.node: p for p in pullers}
    left: list[int] = []
    while True:
        arrived.clear()
        waiting = {n: p for n, p in waiting.items() if not p.done}
        now = time.monotonic()
        if not waiting or now >= deadline:
            break
        listed = set(grid.get_node_ids())
        for node in [n for n in waiting if n not in listed]:
            waiting.pop(node).cancel()
            left.append(node)
        if waiting:
            arrived.wait(min(poll_s, deadline - now))
    for puller in waiting.values():
        puller.cancel()

    # A node given up just as its reply came in still counts: its reply is whole.
    replies = [(p.node, r) for p in pullers if (r := p.reply) is not None]
    answered = {p.node for p in pullers if p.reply is not None}
    left = [n for n in left if n not in answered]
    timed_out = sorted(n for n in waiting if n not in answered)
    for node in left:
        log.warning("node %s left the federation (missed heartbeats) before its reply was in", node)
    for node in timed_out:
        log.warning("node %s: no reply within the round's timeout (%.0f s)", node, timeout_s)
    return RoundReplies(replies, sorted(left + refused), timed_out)
