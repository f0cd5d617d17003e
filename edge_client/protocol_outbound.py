"""What a device publishes in the MQTT protocol (docs/protocol.md): replies to requests (an
answer, a rejection or an error, decoded strictly by the requester), telemetry snapshots, and
its retained online/offline status (decoded strictly by the dashboard)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dartfl.errors import InputError
from edge_client.protocol_wire import (
    ERROR_CODES,
    MAX_DETAIL_CHARS,
    MAX_REQUEST_BYTES,
    PROTOCOL_VERSION,
    REJECT_REASONS,
    RejectReason,
    ReplyStatus,
    _check_name,
    _check_version,
    _dumps,
    _Fail,
    _finite,
    _parse_object,
    _reply_fail,
    _short,
    status_topic,
    telemetry_topic,
)

__all__ = [
    "DeviceStatus",
    "Reply",
    "decode_reply",
    "decode_status",
    "decode_telemetry",
    "encode_error",
    "encode_rejection",
    "encode_reply",
    "encode_status",
    "encode_telemetry",
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


def encode_reply(
    request_id: str, task: str, label: int, latency_ms: float, model_version: str | int
) -> bytes:
    """An answer: `latency_ms` is measured on the device, queue wait + service; the model
    version goes on the wire as a string."""
    if isinstance(label, bool) or not isinstance(label, int | np.integer):
        raise InputError(f"label must be an integer, got {_short(label)}")
    if not (math.isfinite(latency_ms) and latency_ms >= 0):
        raise InputError(f"latency_ms must be finite and >= 0, got {latency_ms!r}")
    return _dumps(
        {
            "v": PROTOCOL_VERSION,
            "id": request_id,
            "task": task,
            "status": "ok",
            "label": int(label),
            "latency_ms": float(latency_ms),
            "model_version": str(model_version),
        }
    )


def encode_rejection(request_id: str, reason: RejectReason, *, task: str | None = None) -> bytes:
    """The request was well formed but not admitted (bounded queue full, or shutting down)."""
    if reason not in REJECT_REASONS:
        raise InputError(f"rejection reason {reason!r} is not one of {sorted(REJECT_REASONS)}")
    return _dumps(
        {"v": PROTOCOL_VERSION, "id": request_id, "task": task, "status": "rejected", "reason": reason}
    )


def encode_error(request_id: str | None, code: str, detail: str, *, task: str | None = None) -> bytes:
    """The request was malformed; `code` is one of ERROR_CODES (from RequestError.code).
    `request_id` is None when the payload did not yield one."""
    if code not in ERROR_CODES:
        raise InputError(f"error code {code!r} is not one of {sorted(ERROR_CODES)}")
    return _dumps(
        {
            "v": PROTOCOL_VERSION,
            "id": request_id,
            "task": task,
            "status": "error",
            "code": code,
            "detail": detail[:MAX_DETAIL_CHARS],
        }
    )


def _opt(obj: Mapping[str, Any], name: str, kind: type) -> Any:
    """An optional reply field of type `kind` (float: any finite number), or None."""
    value = obj.get(name)
    if value is None:
        return None
    if kind is float:
        number = _finite(value)
        if number is None or number < 0:
            _reply_fail(
                "bad-field", f"reply field {name!r} must be a finite number >= 0, got {_short(value)}"
            )
        return number
    if type(value) is not kind:
        _reply_fail("bad-field", f"reply field {name!r} must be {kind.__name__}, got {_short(value)}")
    return value


def _model_version(value: object) -> str | None:
    if value is None or type(value) is str:
        return value
    if type(value) is int:  # lenient: an integer version reads as its string
        return str(value)
    _reply_fail("bad-field", f"reply field 'model_version' must be a string, got {_short(value)}")


def decode_reply(payload: bytes) -> Reply:
    """Decode a reply (requester side). Raises ProtocolError, and nothing else, for any input."""
    fail = _Fail(None, None)
    obj = _parse_object(payload, MAX_REQUEST_BYTES, fail)
    _check_version(obj, fail)
    status = obj.get("status")
    if status not in ("ok", "rejected", "error"):
        _reply_fail("bad-field", f"reply status must be ok, rejected or error, got {_short(status)}")
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
            _reply_fail("missing-field", f"{status} reply lacks {name!r}")
    return reply


# --- telemetry and status -------------------------------------------------------------------


def _jsonable(value: Any, where: str) -> Any:
    """Plain JSON values; numpy scalars/arrays converted, non-finite floats -> null."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist(), where)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise InputError(
        f"telemetry field {where} has a value of type {type(value).__name__}; expected JSON data"
    )


# Unix seconds a device may report: 0 to the year 2286. Far beyond, a dashboard's date
# arithmetic overflows; such a clock is broken anyway.
_MAX_UNIX_S = 1e10


def _unix_s(value: Any) -> float | None:
    """`value` as Unix seconds a device may report, else None (both sides of the wire)."""
    t = _finite(value.item() if isinstance(value, np.generic) else value)
    return t if t is not None and 0.0 <= t <= _MAX_UNIX_S else None


def encode_telemetry(fields: Mapping[str, Any]) -> bytes:
    """One telemetry snapshot (fields in docs/protocol.md); `device` and `t` are required."""
    _check_name("device", fields.get("device", ""))
    t = fields.get("t")
    if _unix_s(t) is None:
        raise InputError(f"telemetry field 't' must be unix seconds (0 to 1e10), got {_short(t)}")
    if fields.get("v", PROTOCOL_VERSION) != PROTOCOL_VERSION:
        raise InputError(f"telemetry field 'v' must be {PROTOCOL_VERSION}, got {_short(fields['v'])}")
    obj = _jsonable(dict(fields), "telemetry")
    return _dumps({"v": PROTOCOL_VERSION, **obj})


def _decode_device_message(
    payload: bytes, topic: str | None, topic_of: Callable[[str], str]
) -> dict[str, Any]:
    fail = _Fail(None, None)
    obj = _parse_object(payload, 1 << 20, fail)
    _check_version(obj, fail)
    device = obj.get("device")
    if not isinstance(device, str):
        _reply_fail(
            "missing-field" if "device" not in obj else "bad-field", "field 'device' must be a string"
        )
    try:
        _check_name("device", device)
    except InputError as exc:
        _reply_fail("bad-field", str(exc))
    if topic is not None and topic != topic_of(device):
        # A device publishes only about itself: a mismatch is a misconfigured or spoofing client.
        _reply_fail("bad-field", f"device {_short(device)} published on another's topic {_short(topic)}")
    if "t" in obj and obj["t"] is not None:
        t = _unix_s(obj["t"])
        if t is None:
            _reply_fail("bad-field", f"field 't' must be unix seconds, got {_short(obj['t'])}")
        obj["t"] = t
    return obj


def decode_telemetry(payload: bytes, topic: str | None = None) -> dict[str, Any]:
    """The telemetry object; raises ProtocolError, and nothing else, for any input. With the
    message's `topic`, the snapshot's device must be the topic's device."""
    obj = _decode_device_message(payload, topic, telemetry_topic)
    if obj.get("t") is None:
        _reply_fail("missing-field", "telemetry field 't' is missing")
    return obj


@dataclass(frozen=True)
class DeviceStatus:
    device: str
    online: bool
    t: float | None = None


def encode_status(
    device: str, online: bool, *, t: float | None = None, extra: Mapping[str, Any] | None = None
) -> bytes:
    """The retained status message; the offline one (without `t`) is the device's last will.
    `extra` adds fields (a cost profile, a final report) next to the required ones."""
    obj: dict[str, Any] = _jsonable(dict(extra or {}), "status")
    obj.update(v=PROTOCOL_VERSION, device=_check_name("device", device))
    obj["state"] = "online" if online else "offline"
    if t is not None:
        obj["t"] = float(t)
    return _dumps(obj)


def decode_status(payload: bytes, topic: str | None = None) -> DeviceStatus:
    obj = _decode_device_message(payload, topic, status_topic)
    state = obj.get("state")
    if state not in ("online", "offline"):
        _reply_fail("bad-field", f"status field 'state' must be online or offline, got {_short(state)}")
    return DeviceStatus(device=obj["device"], online=state == "online", t=obj.get("t"))
