"""Inference requests on the MQTT request plane, version 1 (docs/protocol.md).

Decoding is total: `decode_json_request` (and `dartfl.protocol.decode_request`, which takes
either form) raises `RequestError` (a `ProtocolError`) on any bad
input bytes and nothing else, and carries whatever correlation id / reply topic it could
recover so the agent can still send an error reply.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dartfl.errors import InputError
from dartfl.protocol.jsonwire import Failure, check_version, dumps, finite, parse_object, short
from dartfl.protocol.topics import (
    IMAGE_BYTES,
    IMAGE_DTYPE,
    IMAGE_SHAPE,
    MAX_ID_CHARS,
    PROTOCOL_VERSION,
    ReplyTopicRule,
    reply_topic_problem,
)

__all__ = [
    "MessageProperties",
    "Request",
    "check_reply_to",
    "correlation_id",
    "decode_json_request",
    "encode_request",
    "outgoing_image",
    "valid_id",
]


# --- requests -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Request:
    """A decoded inference request. `image` is a read-only uint8 array of IMAGE_SHAPE.
    `correlation_data` is the MQTT 5 Correlation Data to echo on the reply, if any; `binary`
    says it came in the binary form (dartfl.protocol.binary), so its reply goes in kind."""

    id: str
    task: str
    reply_to: str
    image: np.ndarray
    sent_at: float | None = None
    correlation_data: bytes | None = None
    binary: bool = False

    def __post_init__(self) -> None:
        if self.image.dtype != np.uint8 or self.image.shape != IMAGE_SHAPE:
            raise InputError(
                f"request image has dtype {self.image.dtype} shape {self.image.shape}; "
                f"expected uint8 {IMAGE_SHAPE}"
            )


def valid_id(value: object) -> str | None:
    """The id if it is usable as a correlation id, else None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a JSON "\ud800" escape
        return None
    return value


def correlation_id(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return valid_id(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, TypeError):
        return None


class MessageProperties(NamedTuple):
    """What arrives beside a request payload: its MQTT 5 Response Topic and Correlation Data,
    when present, and the rule that says which reply topics are valid (docs/protocol.md)."""

    response_topic: str | None = None
    correlation_data: bytes | None = None
    reply_rule: ReplyTopicRule = "requester"


def decode_json_request(
    payload: bytes, task: str, known_tasks: Collection[str], max_bytes: int, props: MessageProperties
) -> Request:
    """Validate and decode one request in the JSON form (`dartfl.protocol.decode_request` takes
    either form). The MQTT 5 properties stand in for `reply_to` / `id` missing from the payload
    (the payload wins when both are given). Raises RequestError, and nothing else, for any
    input; a reply topic that breaks the rule is never carried on the error, so nobody can have
    an error reply sent there either.
    """
    response_topic, correlation_data, reply_rule = props

    def valid_reply(value: object) -> bool:
        return reply_topic_problem(value, reply_rule) is None

    # 1. What the MQTT 5 properties give, so even an unparsable payload can be answered.
    prop_id = correlation_id(correlation_data)
    prop_reply = response_topic if valid_reply(response_topic) else None
    fail = Failure(prop_id, prop_reply)
    # 2. Size, JSON, then recover id and reply_to before judging anything else.
    obj = parse_object(payload, max_bytes, fail)
    fail.correlation_id = valid_id(obj.get("id")) or prop_id
    if valid_reply(obj.get("reply_to")):
        fail.reply_to = obj["reply_to"]
    # 3. Version and task: nothing else matters if either is wrong.
    check_version(obj, fail)
    if not isinstance(task, str) or task not in known_tasks:
        fail("unknown-task", f"task {short(task)} is not served here; known tasks: {sorted(known_tasks)}")
    # 4. Addressing.
    if "id" in obj:
        if valid_id(obj["id"]) is None:
            fail(
                "bad-field",
                f"field 'id' must be a string of 1-{MAX_ID_CHARS} characters, got {short(obj['id'])}",
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
        problem = reply_topic_problem(obj["reply_to"], reply_rule)
        if problem is not None:
            fail("bad-field", f"field 'reply_to' {problem}")
        reply_to: str = obj["reply_to"]
    elif response_topic is not None:
        problem = reply_topic_problem(response_topic, reply_rule)
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
        fail("bad-shape", f"field 'shape' must be {list(IMAGE_SHAPE)}, got {short(shape)}")
    if obj["dtype"] != IMAGE_DTYPE:
        fail("bad-dtype", f"field 'dtype' must be {IMAGE_DTYPE!r}, got {short(obj['dtype'])}")
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
    if sent_at is not None and finite(sent_at) is None:
        fail("bad-field", f"field 'sent_at' must be finite seconds, got {short(sent_at)}")
    image = np.frombuffer(raw, dtype=np.uint8).reshape(IMAGE_SHAPE)  # read-only view of `raw`
    return Request(
        id=request_id,
        task=task,
        reply_to=reply_to,
        image=image,
        sent_at=finite(sent_at),
        correlation_data=None if correlation_data is None else bytes(correlation_data),
    )


def check_reply_to(reply_to: str) -> None:
    """A reply topic a requester may ask for (the default reply rule), else InputError."""
    problem = reply_topic_problem(reply_to)
    if problem is not None:
        raise InputError(f"reply topic {short(reply_to)} {problem}")


def outgoing_image(image: np.ndarray, sent_at: float | None) -> np.ndarray:
    """The image of a request to send, in either form: uint8 of IMAGE_SHAPE, with `sent_at`
    finite seconds when given; else InputError."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.shape != IMAGE_SHAPE:
        raise InputError(f"image has dtype {arr.dtype} shape {arr.shape}; expected uint8 {IMAGE_SHAPE}")
    if sent_at is not None and not math.isfinite(sent_at):
        raise InputError(f"sent_at must be finite seconds, got {sent_at!r}")
    return arr


def encode_request(
    request_id: str, image: np.ndarray, reply_to: str, *, sent_at: float | None = None
) -> bytes:
    """The payload of a request; the task goes in the topic (`request_topic`)."""
    if valid_id(request_id) is None:
        raise InputError(f"request id {short(request_id)} must be a string of 1-{MAX_ID_CHARS} characters")
    check_reply_to(reply_to)
    arr = outgoing_image(image, sent_at)
    obj: dict[str, Any] = {
        "v": PROTOCOL_VERSION,
        "id": request_id,
        "reply_to": reply_to,
        "shape": list(IMAGE_SHAPE),
        "dtype": IMAGE_DTYPE,
        "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii"),
    }
    if sent_at is not None:
        obj["sent_at"] = float(sent_at)
    return dumps(obj)
