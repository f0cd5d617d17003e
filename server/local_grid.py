"""An in-memory Grid: delivers each message to a ClientApp called in this process.

The test double of Flower's Grid port (HttpGrid against a SuperLink in production, the
simulation engine in `flwr run`), with the push/pull semantics the round loop relies on: a
message's id is set in place when it is pushed, each reply is pulled once, a node that left
the federation is no longer listed and its message is answered with "Node Unavailable". It
keeps one Context per node, so `context.state` persists across rounds as in a real run.

Faults, each the double of what a real deployment does (issue 16):
- `failing`: the node's ClientApp crashes: an error reply at once;
- `kill(node, "training")`: its SuperNode dies before replying; `offline_after_s` later the
  SuperLink stops listing it (missed heartbeats) and answers its message with an error;
- `kill(node, "uploading")`: it dies while uploading its reply: the reply is on the SuperLink
  but its objects never come, so a pull of it blocks as HttpGrid's does until the push session
  expires (`session_ttl_s`), then yields HttpGrid's "objects unavailable" error; the node
  leaves the federation `offline_after_s` after the kill, like the other.
`reply_after_s[node]` is how long a node takes to reply (its training), 0 unless set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["LocalGrid"]

KillPhase = Literal["training", "uploading"]


@dataclass
class _Pending:
    """A pushed message whose reply has not been pulled yet."""

    message: Message
    reply: Message | None  # None: no reply will come (a node killed while training)
    ready_at: float  # monotonic time from which the reply is on the "SuperLink"
    stalls: bool  # its objects never come (a node killed while uploading)


class LocalGrid:
    def __init__(
        self,
        client_app: ClientApp,
        node_configs: Mapping[int, Mapping[str, Any]],
        run_config: Mapping[str, Any],
        run_id: int = 1,
    ) -> None:
        self.client_app = client_app
        self.contexts = {
            node: Context(
                run_id=run_id,
                node_id=node,
                node_config=dict(cfg),
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for node, cfg in node_configs.items()
        }
        self.failing: set[int] = set()
        self.reply_after_s: dict[int, float] = {}
        self.offline_after_s = 1.0
        self.session_ttl_s = 180.0  # Flower's OBJECT_PUSH_SESSION_TTL_SECONDS
        self.pull_interval = 0.1  # send_and_receive's sleep between pulls
        self.sent: list[Message] = []
        self._kills: dict[int, KillPhase] = {}
        self._killed_at: dict[int, float] = {}
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 0, 1

    def kill(self, node: int, phase: KillPhase) -> None:
        """Kill `node`'s SuperNode in `phase` of the next round it is sent."""
        self._kills[node] = phase

    def close(self) -> None:
        """End every stalled pull at once (tests call this when done)."""
        self._closed.set()

    def get_node_ids(self) -> Iterable[int]:
        now = time.monotonic()
        return [node for node in self.contexts if not self._offline(node, now)]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = msg.object_id  # as HttpGrid does
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            now = time.monotonic()
            phase = self._kills.pop(node, None)
            if phase is not None:
                self._killed_at[node] = now
            if phase is not None or self._offline(node, now):
                reply = None
            elif node in self.failing:
                reply = Message(Error(code=1, reason=f"node {node} crashed"), reply_to=msg)
            else:
                reply = self.client_app(msg, self.contexts[node])
            ready_at = time.monotonic() + self.reply_after_s.get(node, 0.0)
            with self._lock:
                self._pending[msg.metadata.message_id] = _Pending(msg, reply, ready_at, phase == "uploading")
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies in so far, each once; a stalled one blocks as HttpGrid's pull does."""
        out, stalled = [], []
        now = time.monotonic()
        with self._lock:
            for message_id in message_ids:
                pending = self._pending.get(message_id)
                if pending is None:
                    continue
                node = pending.message.metadata.dst_node_id
                if self._offline(node, now):  # the SuperLink checks this before any reply
                    out.append(_error(pending.message, ErrorCode.NODE_UNAVAILABLE, "Node Unavailable"))
                elif now < pending.ready_at:
                    continue
                elif pending.stalls:
                    stalled.append(pending.message)
                elif pending.reply is not None:
                    out.append(pending.reply)
                else:
                    continue
                del self._pending[message_id]
        for msg in stalled:
            self._closed.wait(self.session_ttl_s)
            reason = "Reply message objects are unavailable (the object-push session expired)"
            out.append(_error(msg, ErrorCode.MESSAGE_UNAVAILABLE, reason))
        return out

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Flower's algorithm (HttpGrid, InMemoryGrid): push, then pull every outstanding reply
        in one call until all are in; the timeout is checked only between pulls."""
        msg_ids = set(self.push_messages(messages))
        end = time.monotonic() + (timeout or 0.0)
        replies: list[Message] = []
        while timeout is None or time.monotonic() < end:
            pulled = list(self.pull_messages(msg_ids))
            replies += pulled
            msg_ids -= {m.metadata.reply_to_message_id for m in pulled}
            if not msg_ids:
                break
            time.sleep(self.pull_interval)
        return replies

    def _offline(self, node: int, now: float) -> bool:
        killed_at = self._killed_at.get(node)
        return killed_at is not None and now >= killed_at + self.offline_after_s


def _error(msg: Message, code: int, reason: str) -> Message:
    return Message(Error(code=code, reason=reason), reply_to=msg)
