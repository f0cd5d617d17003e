"""What every message of the MQTT protocol shares (docs/protocol.md): the version, size limits,
QoS levels, error codes, the topic layout, and the JSON helpers the request, reply, telemetry
and status codecs build on.

Pure (standard library + numpy). The underscore helpers here are for the `protocol*` modules
only; everything else imports the protocol through `edge_client.protocol`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, NoReturn

from dartfl.errors import ConfigError, ProtocolError

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
    """`dartfl/v1/<device>/req/<task>` -> (device, task); the task, even an empty one, is
    checked later by `decode_request` (unknown-task), so a subscriber can still answer it."""
    parts = topic.split("/") if isinstance(topic, str) else []
    if len(parts) != 5 or parts[0] != "dartfl" or parts[1] != f"v{PROTOCOL_VERSION}" or parts[3] != "req":
        raise ProtocolError("bad-topic", f"{topic!r} is not a request topic {ROOT}/<device>/req/<task>")
    if not parts[2]:
        raise ProtocolError("bad-topic", f"{topic!r} has an empty device level")
    return parts[2], parts[4]


# --- decoding and encoding helpers ----------------------------------------------------------


class RequestError(ProtocolError):
    """A request that cannot be served; `correlation_id` / `reply_to` are what could be
    recovered from it (None when not), so the agent can still send an error reply."""

    def __init__(
        self, code: str, detail: str, *, correlation_id: str | None = None, reply_to: str | None = None
    ) -> None:
        super().__init__(code, detail)
        self.correlation_id = correlation_id
        self.reply_to = reply_to


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


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")


def _reply_fail(code: str, detail: str) -> NoReturn:
    raise ProtocolError(code, detail)
