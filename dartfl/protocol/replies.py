"""Replies to requests (docs/protocol.md): an answer, a rejection or an error, encoded by the
device and decoded strictly by the requester."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dartfl.errors import InputError
from dartfl.protocol.jsonwire import Failure, check_version, dumps, finite, parse_object, refuse, short
from dartfl.protocol.topics import (
    ERROR_CODES,
    MAX_DETAIL_CHARS,
    MAX_REQUEST_BYTES,
    NAME_RE,
    PROTOCOL_VERSION,
    REJECT_REASONS,
    RejectReason,
    ReplyStatus,
)

__all__ = [
    "Reply",
    "check_answer",
    "check_listed",
    "decode_reply",
    "encode_error",
    "encode_rejection",
    "encode_reply",
]


# --- replies --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A decoded reply. Fields that the status does not use are None."""

    id: str | None
    status: ReplyStatus
    task: str | None = None
    label: int | None = None
    latency_ms: float | None = None
    model_version: str | None = None
    reason: str | None = None
    code: str | None = None
    detail: str | None = None


def check_answer(label: object, latency_ms: float) -> None:
    """What an answer carries in either form: an integer label, a latency finite and >= 0."""
    if isinstance(label, bool) or not isinstance(label, int | np.integer):
        raise InputError(f"label must be an integer, got {short(label)}")
    if not (math.isfinite(latency_ms) and latency_ms >= 0):
        raise InputError(f"latency_ms must be finite and >= 0, got {latency_ms!r}")


def check_listed(what: str, value: str, valid: Collection[str]) -> None:
    """A rejection reason or error code must be one of the closed set `valid` (v1)."""
    if value not in valid:
        raise InputError(f"{what} {value!r} is not one of {sorted(valid)}")


def _task_name(task: object) -> str | None:
    """`task` if it is a task name, else None: an error reply to a request on a topic whose task
    level is junk (60 kB of it, say) must not copy it back, or the requester could not decode
    the reply (decode_reply refuses oversized payloads)."""
    return task if isinstance(task, str) and NAME_RE.fullmatch(task) is not None else None


def _reply(request_id: str | None, task: str | None, status: ReplyStatus, **fields: object) -> bytes:
    """A reply's JSON: the envelope every status shares, then the fields of its status."""
    return dumps({"v": PROTOCOL_VERSION, "id": request_id, "task": task, "status": status, **fields})


def encode_reply(
    request_id: str, task: str, label: int, latency_ms: float, model_version: str | int
) -> bytes:
    """An answer: `latency_ms` is measured on the device, queue wait + service; the model
    version goes on the wire as a string."""
    check_answer(label, latency_ms)
    return _reply(
        request_id,
        task,
        "ok",
        label=int(label),
        latency_ms=float(latency_ms),
        model_version=str(model_version),
    )


def encode_rejection(request_id: str, reason: RejectReason, *, task: str | None = None) -> bytes:
    """The request was well formed but not admitted (bounded queue full, or shutting down)."""
    check_listed("rejection reason", reason, REJECT_REASONS)
    return _reply(request_id, _task_name(task), "rejected", reason=reason)


def encode_error(request_id: str | None, code: str, detail: str, *, task: str | None = None) -> bytes:
    """The request was malformed; `code` is one of ERROR_CODES (from RequestError.code).
    `request_id` is None when the payload did not yield one; `task` goes out as null unless
    it is a task name (it may be whatever a request topic's last level held)."""
    check_listed("error code", code, ERROR_CODES)
    return _reply(request_id, _task_name(task), "error", code=code, detail=detail[:MAX_DETAIL_CHARS])


def _opt(obj: Mapping[str, Any], name: str, kind: type) -> Any:
    """An optional reply field of type `kind` (float: any finite number), or None."""
    value = obj.get(name)
    if value is None:
        return None
    if kind is float:
        number = finite(value)
        if number is None or number < 0:
            refuse("bad-field", f"reply field {name!r} must be a finite number >= 0, got {short(value)}")
        return number
    if type(value) is not kind:
        refuse("bad-field", f"reply field {name!r} must be {kind.__name__}, got {short(value)}")
    return value


def _model_version(value: object) -> str | None:
    if value is None or type(value) is str:
        return value
    if type(value) is int:  # lenient: an integer version reads as its string
        return str(value)
    refuse("bad-field", f"reply field 'model_version' must be a string, got {short(value)}")


def decode_reply(payload: bytes) -> Reply:
    """Decode a reply (requester side). Raises ProtocolError, and nothing else, for any input."""
    fail = Failure(None, None)
    obj = parse_object(payload, MAX_REQUEST_BYTES, fail)
    check_version(obj, fail)
    status = obj.get("status")
    if status not in ("ok", "rejected", "error"):
        refuse("bad-field", f"reply status must be ok, rejected or error, got {short(status)}")
    reply = Reply(
        id=_opt(obj, "id", str),
        status=status,
        task=_opt(obj, "task", str),
        label=_opt(obj, "label", int),
        latency_ms=_opt(obj, "latency_ms", float),
        model_version=_model_version(obj.get("model_version")),
        reason=_opt(obj, "reason", str),
        code=_opt(obj, "code", str),
        detail=_opt(obj, "detail", str),
    )
    required = {"ok": ("id", "label"), "rejected": ("id", "reason"), "error": ("code",)}[status]
    for name in required:
        if getattr(reply, name) is None:
            refuse("missing-field", f"{status} reply lacks {name!r}")
    return reply
