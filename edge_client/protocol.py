"""The MQTT request plane's wire protocol: topics and payloads, version 1 (docs/protocol.md).

Pure (standard library + numpy): no MQTT client here, so the agent, the replayer and the
tests share one codec, and the decoder can be fuzzed without a broker.

Decoding is total: `decode_request` raises `RequestError` (a `ProtocolError`) on any bad
input bytes and nothing else, and carries whatever correlation id / reply topic it could
recover so the agent can still send an error reply.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn

import numpy as np

from dartfl.errors import ConfigError, InputError, ProtocolError

__all__ = [
    "ERROR_CODES",
    "IMAGE_SHAPE",
    "MAX_ID_CHARS",
    "MAX_REPLY_TOPIC_BYTES",
    "MAX_REQUEST_BYTES",
    "PROTOCOL_VERSION",
    "REJECT_REASONS",
    "REPLY_QOS",
    "REQUEST_QOS",
    "STATUS_QOS",
    "TELEMETRY_QOS",
    "DeviceStatus",
    "Reply",
    "Request",
    "RequestError",
    "decode_reply",
    "decode_request",
    "decode_status",
    "decode_telemetry",
    "encode_error",
    "encode_rejection",
    "encode_reply",
    "encode_request",
    "encode_status",
    "encode_telemetry",
    "parse_request_topic",
    "reply_topic",
    "request_subscription",
    "request_topic",
    "status_topic",
    "telemetry_topic",
]

PROTOCOL_VERSION: Final = 1
ROOT: Final = f"dartfl/v{PROTOCOL_VERSION}"
IMAGE_SHAPE: Final = (28, 28)
IMAGE_BYTES: Final = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
IMAGE_DTYPE: Final = "uint8"
MAX_REQUEST_BYTES: Final = 16384
MAX_ID_CHARS: Final = 64
MAX_REPLY_TOPIC_BYTES: Final = 256
MAX_DETAIL_CHARS: Final = 256
REQUEST_QOS: Final = 1
REPLY_QOS: Final = 1
TELEMETRY_QOS: Final = 1
STATUS_QOS: Final = 1

ERROR_CODES: Final = frozenset(
    {
        "oversized-payload",
        "bad-json",
        "unsupported-version",
        "missing-field",
        "bad-field",
        "bad-shape",
        "bad-dtype",
        "bad-data",
        "unknown-task",
    }
)
RejectReason = Literal["queue-full", "shutting-down"]
REJECT_REASONS: Final = frozenset({"queue-full", "shutting-down"})
ReplyStatus = Literal["ok", "rejected", "error"]

# Device and task names become topic levels: keep them plain so no name can be a wildcard,
# start a `$` system topic, or collide with the `_reply` namespace.
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NAME_RULE: Final = "1-64 characters from [A-Za-z0-9_.-], starting with a letter or digit"
_DEVICE_TOPIC_RE: Final = re.compile(rf"{ROOT}/[^/]*/(req/[^/]*|telemetry|status)")


# --- topics ---------------------------------------------------------------------------------


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise ConfigError(f"bad {kind} name {name!r}: expected {_NAME_RULE}")
    return name


def request_topic(device: str, task: str) -> str:
    """Where requesters publish a request for `task` on `device`."""
    return f"{ROOT}/{_check_name('device', device)}/req/{_check_name('task', task)}"


def request_subscription(device: str) -> str:
    """The wildcard a device subscribes to for requests of all its tasks."""
    return f"{ROOT}/{_check_name('device', device)}/req/+"


def telemetry_topic(device: str) -> str:
    return f"{ROOT}/{_check_name('device', device)}/telemetry"


def status_topic(device: str) -> str:
    """Retained online/offline state; the device's last will goes here."""
    return f"{ROOT}/{_check_name('device', device)}/status"


def reply_topic(requester: str) -> str:
    """A suggested reply topic for a requester (any topic outside `dartfl/v1/<device>/` works)."""
    return f"{ROOT}/_reply/{_check_name('requester', requester)}"


def parse_request_topic(topic: str) -> tuple[str, str]:
    """`dartfl/v1/<device>/req/<task>` -> (device, task); the task is checked later by
    `decode_request` (unknown-task), so a subscriber can still answer it."""
    parts = topic.split("/") if isinstance(topic, str) else []
    if len(parts) != 5 or parts[0] != "dartfl" or parts[1] != f"v{PROTOCOL_VERSION}" or parts[3] != "req":
        raise ProtocolError("bad-topic", f"{topic!r} is not a request topic {ROOT}/<device>/req/<task>")
    if not parts[2] or not parts[4]:
        raise ProtocolError("bad-topic", f"{topic!r} has an empty device or task level")
    return parts[2], parts[4]


# --- requests -------------------------------------------------------------------------------


class RequestError(ProtocolError):
    """A request that cannot be served; `correlation_id` / `reply_to` are what could be
    recovered from it (None when not), so the agent can still send an error reply."""

    def __init__(
        self, code: str, detail: str, *, correlation_id: str | None = None, reply_to: str | None = None
    ) -> None:
        super().__init__(code, detail)
        self.correlation_id = correlation_id
        self.reply_to = reply_to


@dataclass(frozen=True, eq=False)
class Request:
    """A decoded inference request. `image` is a read-only uint8 array of IMAGE_SHAPE.
    `correlation_data` is the MQTT 5 Correlation Data to echo on the reply, if any."""

    id: str
    task: str
    reply_to: str
    image: np.ndarray
    sent_at: float | None = None
    correlation_data: bytes | None = None

    def __post_init__(self) -> None:
        if self.image.dtype != np.uint8 or self.image.shape != IMAGE_SHAPE:
            raise InputError(
                f"request image has dtype {self.image.dtype} shape {self.image.shape}; "
                f"expected uint8 {IMAGE_SHAPE}"
            )


def _valid_id(value: object) -> str | None:
    """The id if it is usable as a correlation id, else None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a JSON "\ud800" escape
        return None
    return value


def _reply_topic_problem(value: object) -> str | None:
    """Why `value` cannot be a reply topic, or None if it can."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if not 0 < size <= MAX_REPLY_TOPIC_BYTES:
        return f"must be 1-{MAX_REPLY_TOPIC_BYTES} UTF-8 bytes, got {size}"
    if "+" in value or "#" in value or "\x00" in value or value.startswith("$"):
        return "must not contain wildcards or NUL, nor start with '$'"
    # Replies must never land on a device's own topics (a reply published to a request
    # topic would come back to the device as a malformed request).
    if _DEVICE_TOPIC_RE.fullmatch(value) is not None:
        return f"must not be a device topic ({ROOT}/<device>/req/<task>, /telemetry or /status)"
    return None


def _correlation_id(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return _valid_id(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, TypeError):
        return None


def _parse_object(payload: object, max_bytes: int, fail: _Fail) -> dict[str, Any]:
    if not isinstance(payload, bytes | bytearray | memoryview):
        fail("bad-json", f"payload must be bytes, got {type(payload).__name__}")
    size = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
    if size > max_bytes:
        fail("oversized-payload", f"payload is {size} bytes; the limit is {max_bytes}")
    try:
        obj = json.loads(bytes(payload).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError included
        fail("bad-json", f"payload is not UTF-8 JSON: {str(exc)[:120]}")
    if not isinstance(obj, dict):
        fail("bad-json", f"payload must be a JSON object, got {type(obj).__name__}")
    return obj


def _check_version(obj: Mapping[str, Any], fail: _Fail) -> None:
    if "v" not in obj:
        fail("missing-field", "field 'v' (protocol version) is missing")
    v = obj["v"]
    if type(v) is not int:
        fail("bad-field", f"field 'v' must be an integer, got {_short(v)}")
    if v != PROTOCOL_VERSION:
        fail(
            "unsupported-version",
            f"protocol version {_short(v)} is not supported; this device speaks {PROTOCOL_VERSION}",
        )


class _Fail:
    """Raises RequestError with the best correlation id and reply topic known so far."""

    def __init__(self, correlation_id: str | None, reply_to: str | None) -> None:
        self.correlation_id = correlation_id
        self.reply_to = reply_to

    def __call__(self, code: str, detail: str) -> NoReturn:
        raise RequestError(code, detail, correlation_id=self.correlation_id, reply_to=self.reply_to)


def _finite(value: object) -> float | None:
    """`value` as a float if it is a finite JSON number (not a bool), else None."""
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # a 400-digit JSON integer
        return None
    return number if math.isfinite(number) else None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def decode_request(
    payload: bytes,
    task: str,
    known_tasks: Collection[str],
    max_bytes: int = MAX_REQUEST_BYTES,
    *,
    response_topic: str | None = None,
    correlation_data: bytes | None = None,
) -> Request:
    """Validate and decode one request published on the request topic of `task`.

    `response_topic` / `correlation_data` are the MQTT 5 properties of the message, when
    present: they stand in for `reply_to` / `id` missing from the payload (the payload wins
    when both are given). Raises RequestError, and nothing else, for any input.
    """
    # 1. What the MQTT 5 properties give, so even an unparsable payload can be answered.
    prop_id = _correlation_id(correlation_data)
    prop_reply = response_topic if _reply_topic_problem(response_topic) is None else None
    fail = _Fail(prop_id, prop_reply)
    # 2. Size, JSON, then recover id and reply_to before judging anything else.
    obj = _parse_object(payload, max_bytes, fail)
    fail.correlation_id = _valid_id(obj.get("id")) or prop_id
    if _reply_topic_problem(obj.get("reply_to")) is None:
        fail.reply_to = obj["reply_to"]
    # 3. Version and task: nothing else matters if either is wrong.
    _check_version(obj, fail)
    if not isinstance(task, str) or task not in known_tasks:
        fail("unknown-task", f"task {_short(task)} is not served here; known tasks: {sorted(known_tasks)}")
    # 4. Addressing.
    if "id" in obj:
        if _valid_id(obj["id"]) is None:
            fail(
                "bad-field",
                f"field 'id' must be a string of 1-{MAX_ID_CHARS} characters, got {_short(obj['id'])}",
            )
        request_id: str = obj["id"]
    elif correlation_data is not None:
        if prop_id is None:
            fail(
                "bad-field",
                f"Correlation Data must be UTF-8 of 1-{MAX_ID_CHARS} characters when 'id' is absent",
            )
        request_id = prop_id
    else:
        fail("missing-field", "field 'id' is missing (and no MQTT 5 Correlation Data)")
    if "reply_to" in obj:
        problem = _reply_topic_problem(obj["reply_to"])
        if problem is not None:
            fail("bad-field", f"field 'reply_to' {problem}")
        reply_to: str = obj["reply_to"]
    elif response_topic is not None:
        problem = _reply_topic_problem(response_topic)
        if problem is not None:
            fail("bad-field", f"MQTT 5 Response Topic {problem}")
        reply_to = response_topic
    else:
        fail("missing-field", "field 'reply_to' is missing (and no MQTT 5 Response Topic)")
    # 5. The image.
    for name in ("shape", "dtype", "data"):
        if name not in obj:
            fail("missing-field", f"field {name!r} is missing")
    shape = obj["shape"]
    if not (
        isinstance(shape, list) and [type(x) for x in shape] == [int, int] and tuple(shape) == IMAGE_SHAPE
    ):
        fail("bad-shape", f"field 'shape' must be {list(IMAGE_SHAPE)}, got {_short(shape)}")
    if obj["dtype"] != IMAGE_DTYPE:
        fail("bad-dtype", f"field 'dtype' must be {IMAGE_DTYPE!r}, got {_short(obj['dtype'])}")
    data = obj["data"]
    if not isinstance(data, str):
        fail("bad-data", f"field 'data' must be a base64 string, got {type(data).__name__}")
    try:
        raw = base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error):  # non-ASCII text is a ValueError, bad padding binascii.Error
        fail("bad-data", "field 'data' is not valid base64")
    if len(raw) != IMAGE_BYTES:
        fail("bad-data", f"field 'data' decodes to {len(raw)} bytes; expected {IMAGE_BYTES}")
    # 6. Optional requester timestamp.
    sent_at = obj.get("sent_at")
    if sent_at is not None and _finite(sent_at) is None:
        fail("bad-field", f"field 'sent_at' must be finite seconds, got {_short(sent_at)}")
    image = np.frombuffer(raw, dtype=np.uint8).reshape(IMAGE_SHAPE)  # read-only view of `raw`
    return Request(
        id=request_id,
        task=task,
        reply_to=reply_to,
        image=image,
        sent_at=_finite(sent_at),
        correlation_data=None if correlation_data is None else bytes(correlation_data),
    )


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")


def encode_request(
    request_id: str, image: np.ndarray, reply_to: str, *, sent_at: float | None = None
) -> bytes:
    """The payload of a request; the task goes in the topic (`request_topic`)."""
    if _valid_id(request_id) is None:
        raise InputError(f"request id {_short(request_id)} must be a string of 1-{MAX_ID_CHARS} characters")
    problem = _reply_topic_problem(reply_to)
    if problem is not None:
        raise InputError(f"reply topic {_short(reply_to)} {problem}")
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.shape != IMAGE_SHAPE:
        raise InputError(f"image has dtype {arr.dtype} shape {arr.shape}; expected uint8 {IMAGE_SHAPE}")
    obj: dict[str, Any] = {
        "v": PROTOCOL_VERSION,
        "id": request_id,
        "reply_to": reply_to,
        "shape": list(IMAGE_SHAPE),
        "dtype": IMAGE_DTYPE,
        "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii"),
    }
    if sent_at is not None:
        if not math.isfinite(sent_at):
            raise InputError(f"sent_at must be finite seconds, got {sent_at!r}")
        obj["sent_at"] = float(sent_at)
    return _dumps(obj)


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


def _reply_fail(code: str, detail: str) -> NoReturn:
    raise ProtocolError(code, detail)


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


def encode_telemetry(fields: Mapping[str, Any]) -> bytes:
    """One telemetry snapshot (fields in docs/protocol.md); `device` and `t` are required."""
    _check_name("device", fields.get("device", ""))
    t = fields.get("t")
    if _finite(t.item() if isinstance(t, np.generic) else t) is None:
        raise InputError(f"telemetry field 't' must be finite unix seconds, got {_short(t)}")
    if fields.get("v", PROTOCOL_VERSION) != PROTOCOL_VERSION:
        raise InputError(f"telemetry field 'v' must be {PROTOCOL_VERSION}, got {_short(fields['v'])}")
    obj = _jsonable(dict(fields), "telemetry")
    return _dumps({"v": PROTOCOL_VERSION, **obj})


def _decode_device_message(payload: bytes) -> dict[str, Any]:
    fail = _Fail(None, None)
    obj = _parse_object(payload, 1 << 20, fail)
    _check_version(obj, fail)
    if not isinstance(obj.get("device"), str):
        _reply_fail(
            "missing-field" if "device" not in obj else "bad-field", "field 'device' must be a string"
        )
    if "t" in obj and obj["t"] is not None:
        t = _finite(obj["t"])
        if t is None:
            _reply_fail("bad-field", f"field 't' must be finite unix seconds, got {_short(obj['t'])}")
        obj["t"] = t
    return obj


def decode_telemetry(payload: bytes) -> dict[str, Any]:
    """The telemetry object; raises ProtocolError, and nothing else, for any input."""
    obj = _decode_device_message(payload)
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


def decode_status(payload: bytes) -> DeviceStatus:
    obj = _decode_device_message(payload)
    state = obj.get("state")
    if state not in ("online", "offline"):
        _reply_fail("bad-field", f"status field 'state' must be online or offline, got {_short(state)}")
    return DeviceStatus(device=obj["device"], online=state == "online", t=obj.get("t"))
