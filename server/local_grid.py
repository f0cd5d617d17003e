"""An in-memory Grid: delivers each message to a ClientApp called in this process.

The test double of Flower's Grid port (the SuperLink in production, the simulation engine in
`flwr run`): it keeps one Context per node, so `context.state` persists across rounds as in a
real run. Nodes listed in `failing` answer with an error reply, like a crashed ClientApp.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["LocalGrid"]


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
        self.sent: list[Message] = []
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 0, 1

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node in self.failing:
                replies.append(Message(Error(code=1, reason=f"node {node} crashed"), reply_to=msg))
                continue
            replies.append(self.client_app(msg, self.contexts[node]))
        return replies
