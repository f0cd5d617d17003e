"""The JSON layer every message of the protocol shares: strict parsing, the version check,
number and time checks, compact encoding.

Decoders are total: they raise `ProtocolError` (or its `RequestError`, which carries what a
request's reply needs) for any input and nothing else. `Failure` raises with the best reply
address recovered so far, so even a broken request can be answered.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, NoReturn

import numpy as np

from dartfl.errors import InputError, ProtocolError
from dartfl.protocol.topics import PROTOCOL_VERSION

__all__ = [
    "MAX_UNIX_S",
    "Failure",
    "RequestError",
    "check_version",
    "dumps",
    "finite",
    "jsonable",
    "parse_object",
    "refuse",
    "short",
    "unix_s",
]

# Unix seconds a device may report: 0 to the year 2286. Far beyond, a dashboard's date
# arithmetic overflows; such a clock is broken anyway.
MAX_UNIX_S: Final = 1e10


class RequestError(ProtocolError):
    """A request that cannot be served; `correlation_id` / `reply_to` are what could be
    recovered from it (None when not), so the agent can still send an error reply."""

    def __init__(
        self, code: str, detail: str, *, correlation_id: str | None = None, reply_to: str | None = None
    ) -> None:
        super().__init__(code, detail)
        self.correlation_id = correlation_id
        self.reply_to = reply_to


class Failure:
    """Raises RequestError with the best correlation id and reply topic known so far."""

    def __init__(self, correlation_id: str | None = None, reply_to: str | None = None) -> None:
        self.correlation_id = correlation_id
        self.reply_to = reply_to

    def __call__(self, code: str, detail: str) -> NoReturn:
        raise RequestError(code, detail, correlation_id=self.correlation_id, reply_to=self.reply_to)


def refuse(code: str, detail: str) -> NoReturn:
    """A message other than a request is refused: there is nobody to reply to."""
    raise ProtocolError(code, detail)


def parse_object(payload: object, max_bytes: int, fail: Failure) -> dict[str, Any]:
    """`payload` as a JSON object of at most `max_bytes` bytes."""
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


def check_version(obj: Mapping[str, Any], fail: Failure) -> None:
    if "v" not in obj:
        fail("missing-field", "field 'v' (protocol version) is missing")
    v = obj["v"]
    if type(v) is not int:
        fail("bad-field", f"field 'v' must be an integer, got {short(v)}")
    if v != PROTOCOL_VERSION:
        fail(
            "unsupported-version",
            f"protocol version {short(v)} is not supported; this device speaks {PROTOCOL_VERSION}",
        )


def finite(value: object) -> float | None:
    """`value` as a float if it is a finite JSON number (not a bool), else None."""
    if isinstance(value, np.generic):
        value = value.item()
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:  # a 400-digit JSON integer
        return None
    return number if math.isfinite(number) else None


def unix_s(value: object) -> float | None:
    """`value` as Unix seconds a device may report, else None (both sides of the wire)."""
    t = finite(value)
    return t if t is not None and 0.0 <= t <= MAX_UNIX_S else None


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")


def jsonable(value: Any, where: str) -> Any:
    """Plain JSON values; numpy scalars/arrays converted, non-finite floats -> null."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist(), where)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise InputError(f"field {where} has a value of type {type(value).__name__}; expected JSON data")
