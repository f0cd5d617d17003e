"""The device agent's ingress, run on paho's network thread for every request message.

It decodes and queues, or answers at once: an error reply for a malformed request, a
rejection when the task's queue is full or the agent is shutting down. It never waits for
the model, so a slow model cannot stall the network thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from dartfl.errors import ProtocolError
from edge_client import protocol
from edge_client.queues import QueuedRequest, RequestQueues
from edge_client.telemetry import RequestStats

log = logging.getLogger(__name__)

__all__ = ["admit_request"]

# (reply topic, payload, MQTT 5 correlation data)
Reply = Callable[[str, bytes, bytes | None], None]


def admit_request(
    message: Any,
    task_index: Mapping[str, int],
    max_payload_bytes: int,
    queues: RequestQueues,
    stats: RequestStats,
    reply: Reply,
) -> None:
    """Decode one request message (edge_client.mqtt.Message) and queue it, or answer it now."""
    received = time.monotonic()
    stats.count(requests=1)
    try:
        _, task = protocol.parse_request_topic(message.topic)
        request = protocol.decode_request(
            message.payload,
            task,
            task_index,
            max_bytes=max_payload_bytes,
            response_topic=message.response_topic,
            correlation_data=message.correlation_data,
        )
    except ProtocolError as exc:
        stats.count(errors=1)
        # Only the reply address the decoder validated: a raw Response Topic may be another
        # device's request topic, or a wildcard that the client refuses to publish to.
        reply_to = getattr(exc, "reply_to", None)
        if reply_to:
            task_name = message.topic.rsplit("/", 1)[-1]
            error = protocol.encode_error(
                request_id=getattr(exc, "correlation_id", None),
                code=exc.code,
                detail=exc.detail,
                task=task_name,
            )
            reply(reply_to, error, message.correlation_data)
        log.debug("bad request on %s: %s", message.topic, exc)
    else:
        queued = QueuedRequest(
            request.id,
            task_index[request.task],
            request.reply_to,
            request.image,
            received,
            request.correlation_data,
        )
        if not queues.offer(queued):
            reason: protocol.RejectReason = "shutting-down" if queues.closed else "queue-full"
            stats.rejected_now(received)
            reply(
                request.reply_to,
                protocol.encode_rejection(request_id=request.id, reason=reason, task=request.task),
                request.correlation_data,
            )
