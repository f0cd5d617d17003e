"""Replies in the request's own form: a binary request gets a binary reply (with its MQTT 5
content type), a JSON one a JSON reply. Each returns (payload, content type or None)."""

from __future__ import annotations

from dartfl.protocol.binary import (
    REPLY_CONTENT_TYPE,
    encode_binary_error,
    encode_binary_rejection,
    encode_binary_reply,
)
from dartfl.protocol.replies import encode_error, encode_rejection, encode_reply
from dartfl.protocol.topics import RejectReason

__all__ = ["Encoded", "answer", "failure", "refusal"]

Encoded = tuple[bytes, str | None]


def answer(
    binary: bool, request_id: str, task: str, label: int, latency_ms: float, model_version: int
) -> Encoded:
    """The request was served: its label, the latency the device measured, the model version."""
    if binary:
        return encode_binary_reply(request_id, label, latency_ms, model_version), REPLY_CONTENT_TYPE
    return encode_reply(request_id, task, label, latency_ms, str(model_version)), None


def refusal(binary: bool, request_id: str, reason: RejectReason, task: str) -> Encoded:
    """The request was well formed but not admitted."""
    if binary:
        return encode_binary_rejection(request_id, reason), REPLY_CONTENT_TYPE
    return encode_rejection(request_id, reason, task=task), None


def failure(binary: bool, request_id: str | None, code: str, detail: str, task: str) -> Encoded:
    """The request was malformed (`code` is one of the protocol's error codes)."""
    if binary:
        return encode_binary_error(request_id, code, detail), REPLY_CONTENT_TYPE
    return encode_error(request_id, code, detail, task=task), None
