"""The device agent's ingress, run on paho's network thread for every request message.

It decodes and queues, or answers at once: an error reply for a malformed request, a
rejection when the task's queue is full or the agent is shutting down. It never waits for
the model, so a slow model cannot stall the network thread. A request whose reply topic breaks
the reply rule (docs/protocol.md) is counted as an error and not answered at all: answering it
on that topic is exactly the reflection the rule stops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl import protocol
from dartfl.errors import ProtocolError
from dartfl.executor import Admission
from dartfl.protocol import ReplyTopicRule
from edge_client.answered import RecentRequests
from edge_client.telemetry import RequestStats
from edge_client.transit import TransitClock
from messaging.link import Message

log = logging.getLogger(__name__)

__all__ = ["Admit", "QueuedRequest", "admit_request"]


@dataclass(frozen=True, slots=True, eq=False)
class QueuedRequest:
    """A decoded request waiting for service. `received_s` is on the agent's monotonic clock:
    when it was received, less what it had waited on its way (edge_client/transit.py)."""

    id: str
    task: int
    reply_to: str
    image: npt.NDArray[np.uint8]
    received_s: float
    correlation_data: bytes | None = None  # MQTT 5: echoed on the reply
    binary: bool = False  # it came in the binary form: its reply goes in kind


# Publishes a reply: (reply topic, (payload, content type), MQTT 5 correlation data).
Reply = Callable[[str, protocol.Encoded, bytes | None], None]
# Hands a request to the device executor (under the agent's lock): queued or refused, and why.
# Its arguments: when it was received, its task, the request, how long it had waited on its way.
Admit = Callable[[float, int, QueuedRequest, float], Admission]


def admit_request(
    message: Message,
    task_index: Mapping[str, int],
    max_payload_bytes: int,
    admit: Admit,
    stats: RequestStats,
    reply: Reply,
    *,
    reply_rule: ReplyTopicRule = "requester",
    recent: RecentRequests | None = None,
    transit: TransitClock | None = None,
) -> None:
    """Decode one request message (messaging.link.Message) and queue it, or answer it now.
    A copy of a request in `recent` (same reply topic, id, task and image) is not a request:
    it gets the answer already sent, or nothing while the first is still pending
    (edge_client.answered). With `transit`, a request's SLO runs from when it was sent
    (edge_client/transit.py)."""
    if message.retain:
        # A retained copy, delivered because this link (re)subscribed: requests are never
        # retained (docs/protocol.md), and one planted so would be served again, and counted,
        # at every restart and reconnect. Its requester, if still there, has long timed out.
        stats.count(requests=1, errors=1)
        log.debug("a retained request on %s: dropped (requests are never retained)", message.topic)
        return
    received = time.monotonic()
    received_at = time.time()
    try:
        _, task = protocol.parse_request_topic(message.topic)
        request = protocol.decode_request(
            message.payload,
            task,
            task_index,
            max_bytes=max_payload_bytes,
            content_type=message.content_type,
            response_topic=message.response_topic,
            correlation_data=message.correlation_data,
            reply_rule=reply_rule,
        )
    except ProtocolError as exc:
        stats.count(requests=1, errors=1)
        # Only the reply address the decoder validated: a raw Response Topic may be another
        # device's request topic, a topic outside the reply namespace (reflection), or a
        # wildcard that the client refuses to publish to.
        reply_to = getattr(exc, "reply_to", None)
        if reply_to:
            binary = protocol.is_binary(message.payload, message.content_type)
            task_name = message.topic.rsplit("/", 1)[-1]
            error = protocol.failure(
                binary, getattr(exc, "correlation_id", None), exc.code, exc.detail, task_name
            )
            reply(reply_to, error, message.correlation_data)
        log.debug("bad request on %s: %s", message.topic, exc)
    else:
        if recent is not None:
            new, earlier = recent.take(request.reply_to, request.id, request.task, request.image)
            if not new:
                if earlier is not None:
                    reply(request.reply_to, earlier, request.correlation_data)
                log.debug("a copy of request %r from %s", request.id, request.reply_to)
                return
        stats.count(requests=1)
        task_id = task_index[request.task]
        waited = 0.0 if transit is None else transit.waited_s(request.reply_to, request.sent_at, received_at)
        queued = QueuedRequest(
            request.id,
            task_id,
            request.reply_to,
            request.image,
            received - waited,
            request.correlation_data,
            request.binary,
        )
        reason = admit(received, task_id, queued, waited)
        if reason != "queued":
            stats.rejected_now(received)
            refused = protocol.refusal(request.binary, request.id, reason, request.task)
            if recent is not None:
                recent.answered(request.reply_to, request.id, refused)
            reply(request.reply_to, refused, request.correlation_data)
