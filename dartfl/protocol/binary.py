"""The compact binary form of requests and replies (docs/protocol.md, "Binary payloads").

Beside the JSON form, a requester may send a request as a fixed little header and the raw
image bytes: no JSON, no base64, about 40 % of the bytes, and a decoder that is a struct
unpack. Under MQTT 5 the message carries the content type `REQUEST_CONTENT_TYPE`; under 3.1.1,
which has no properties, a decoder tells the forms apart by the first byte (a JSON object
starts with `{`, a binary request with the magic `DR`). A binary request is answered with a
binary reply (`REPLY_CONTENT_TYPE`, magic `DA`), a JSON one with a JSON reply.

Request, big-endian:

    magic "DR" | version u8 | flags u8 | id length u8 | reply-topic length u16 |
    height u16 | width u16 | dtype u8 (1: uint8) | [sent_at f64 if flags & 1] |
    id (UTF-8) | reply topic (UTF-8; empty: the MQTT 5 Response Topic) | image bytes

Reply, big-endian, one record per request:

    magic "DA" | version u8 | status u8 (0 ok, 1 rejected, 2 error) | reason or code u8 |
    id length u8 | detail length u16 | label i32 | latency_ms f32 | model version u32 |
    id (UTF-8) | detail (UTF-8, errors only)

A binary reply payload holds one or more records back to back: a device answering a batch
publishes the replies that go to the same reply topic (and carry their id in the payload) as
one message, so its cost per reply falls with the batch. The id may be empty when the MQTT 5
Correlation Data carries it (such a reply goes alone). Every field is checked as strictly as
in the JSON form, with the same error codes.

An id travels whole or not at all: its length field is one byte, so an id of the binary form
is at most `MAX_ID_BYTES` of UTF-8 as well as 1-64 characters (only 64 four-byte characters
exceed it). A binary request whose id would not fit, which only MQTT 5 Correlation Data can
carry, is refused (`bad-field`), so every id it accepts comes back exactly. A reply record
whose contents are bad (not UTF-8, an unknown code) spoils that record only: its header
still says where the next one starts (`decode_binary_records`).
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Collection
from typing import Final

import numpy as np

from dartfl.errors import InputError, ProtocolError
from dartfl.protocol.jsonwire import Failure, short
from dartfl.protocol.replies import Reply, check_answer, check_listed, decode_reply
from dartfl.protocol.requests import (
    MessageProperties,
    Request,
    check_reply_to,
    correlation_id,
    decode_json_request,
    outgoing_image,
    valid_id,
)
from dartfl.protocol.topics import (
    ERROR_CODES,
    IMAGE_BYTES,
    IMAGE_SHAPE,
    MAX_DETAIL_CHARS,
    MAX_ID_CHARS,
    MAX_REQUEST_BYTES,
    PROTOCOL_VERSION,
    REJECT_REASONS,
    RejectReason,
    ReplyTopicRule,
    reply_topic_problem,
)

__all__ = [
    "REPLY_CONTENT_TYPE",
    "REQUEST_CONTENT_TYPE",
    "decode_any_replies",
    "decode_any_reply",
    "decode_binary_records",
    "decode_binary_replies",
    "decode_binary_reply",
    "decode_request",
    "encode_binary_error",
    "encode_binary_rejection",
    "encode_binary_reply",
    "encode_binary_request",
    "is_binary",
]

log = logging.getLogger(__name__)

REQUEST_CONTENT_TYPE: Final = "application/vnd.dartfl.request+binary; v=1"
REPLY_CONTENT_TYPE: Final = "application/vnd.dartfl.reply+binary; v=1"
REQUEST_MAGIC: Final = b"DR"
REPLY_MAGIC: Final = b"DA"
_REQUEST_HEAD = struct.Struct(">2sBBBHHHB")
_SENT_AT = struct.Struct(">d")
_REPLY_HEAD = struct.Struct(">2sBBBBHifI")
_UINT8: Final = 1
_HAS_SENT_AT: Final = 1
# Codes on the wire are indexes into these fixed, ordered lists (closed sets in v1).
_STATUSES: Final = ("ok", "rejected", "error")
_REASONS: Final = tuple(sorted(REJECT_REASONS))
_CODES: Final = tuple(sorted(ERROR_CODES))
# The id's length field is one byte: the most UTF-8 an id of the binary form may have.
MAX_ID_BYTES: Final = 255


def is_binary(payload: bytes, content_type: str | None = None) -> bool:
    """Whether `payload` is in the binary form: the MQTT 5 content type says so, or (without
    one, under MQTT 3.1.1) it starts with a binary magic instead of a JSON object."""
    if content_type is not None:
        return content_type in (REQUEST_CONTENT_TYPE, REPLY_CONTENT_TYPE)
    return payload[:2] in (REQUEST_MAGIC, REPLY_MAGIC)


def encode_binary_request(
    request_id: str, image: np.ndarray, reply_to: str = "", *, sent_at: float | None = None
) -> bytes:
    """A request in the binary form; an empty `reply_to` leaves it to the Response Topic."""
    ident = _id_bytes(request_id)
    if reply_to:
        check_reply_to(reply_to)
    arr = outgoing_image(image, sent_at)
    topic = reply_to.encode("utf-8")
    flags = 0
    stamp = b""
    if sent_at is not None:
        flags |= _HAS_SENT_AT
        stamp = _SENT_AT.pack(sent_at)
    head = _REQUEST_HEAD.pack(
        REQUEST_MAGIC, PROTOCOL_VERSION, flags, len(ident), len(topic), *IMAGE_SHAPE, _UINT8
    )
    return b"".join((head, stamp, ident, topic, np.ascontiguousarray(arr).tobytes()))


def _id_bytes(request_id: str | None) -> bytes:
    """The id's UTF-8 for a binary frame: empty for None or "", else a valid id that fits the
    one-byte length field whole (never cut: a cut id matches nothing); else InputError."""
    if request_id is None or request_id == "":
        return b""
    if valid_id(request_id) is None:
        raise InputError(f"request id {short(request_id)} must be a string of 0-{MAX_ID_CHARS} characters")
    ident = request_id.encode("utf-8")
    if len(ident) > MAX_ID_BYTES:
        raise InputError(
            f"request id {short(request_id)} is {len(ident)} bytes of UTF-8; the binary form holds "
            f"{MAX_ID_BYTES}: use a shorter id or the JSON form"
        )
    return ident


def _fits(request_id: str | None) -> str | None:
    """`request_id` if a binary reply can carry it whole, else None."""
    return request_id if request_id is None or len(request_id.encode("utf-8")) <= MAX_ID_BYTES else None


def _decode_binary_request(
    payload: bytes, task: str, known_tasks: Collection[str], max_bytes: int, props: MessageProperties
) -> Request:
    """Validate and decode one binary request; raises RequestError, and nothing else. A reply
    topic that breaks the reply rule is never carried on the error (docs/protocol.md)."""
    response_topic, correlation_data, reply_rule = props
    # A Correlation Data id too long for a binary reply's id field is refused below; its error
    # reply carries no id (the echoed Correlation Data still matches it).
    prop_id = _fits(correlation_id(correlation_data))
    prop_reply = response_topic if reply_topic_problem(response_topic, reply_rule) is None else None
    fail = Failure(prop_id, prop_reply)
    if not isinstance(payload, bytes | bytearray | memoryview):
        fail("bad-data", f"payload must be bytes, got {type(payload).__name__}")
    view = memoryview(payload)
    if view.nbytes > max_bytes:
        fail("oversized-payload", f"payload is {view.nbytes} bytes; the limit is {max_bytes}")
    if view.nbytes < _REQUEST_HEAD.size:
        fail("bad-data", f"a binary request needs a {_REQUEST_HEAD.size}-byte header, got {view.nbytes}")
    magic, version, flags, id_len, topic_len, height, width, dtype = _REQUEST_HEAD.unpack_from(view)
    if magic != REQUEST_MAGIC:
        fail("bad-data", f"a binary request starts with {REQUEST_MAGIC!r}, got {bytes(magic)!r}")
    at = _REQUEST_HEAD.size
    sent_at = None
    if flags & _HAS_SENT_AT:
        if view.nbytes < at + _SENT_AT.size:
            fail("bad-data", "the header announces sent_at but the payload ends")
        (sent_at,) = _SENT_AT.unpack_from(view, at)
        at += _SENT_AT.size
    ident, at = _text(view, at, id_len, "id", fail)
    reply, at = _text(view, at, topic_len, "reply topic", fail)
    if ident and valid_id(ident) is not None:
        fail.correlation_id = ident
    if reply and reply_topic_problem(reply, reply_rule) is None:
        fail.reply_to = reply
    # Version and task first, as in the JSON form: nothing else matters if either is wrong.
    if version != PROTOCOL_VERSION:
        fail("unsupported-version", f"protocol version {version} is not supported; this device speaks 1")
    if task not in known_tasks:
        fail("unknown-task", f"task {short(task)} is not served here; known tasks: {sorted(known_tasks)}")
    request_id = _request_id(ident, prop_id, correlation_data, fail)
    reply_to = _reply_to(reply, response_topic, fail, reply_rule)
    if (height, width) != IMAGE_SHAPE:
        fail("bad-shape", f"the image must be {list(IMAGE_SHAPE)}, got {[height, width]}")
    if dtype != _UINT8:
        fail("bad-dtype", f"the image dtype code must be {_UINT8} (uint8), got {dtype}")
    if view.nbytes - at != IMAGE_BYTES:
        fail("bad-data", f"the image has {view.nbytes - at} bytes; expected {IMAGE_BYTES}")
    if sent_at is not None and not math.isfinite(sent_at):
        fail("bad-field", f"sent_at must be finite seconds, got {sent_at!r}")
    image = np.frombuffer(payload, dtype=np.uint8, count=IMAGE_BYTES, offset=at).reshape(IMAGE_SHAPE)
    return Request(
        id=request_id,
        task=task,
        reply_to=reply_to,
        image=image,
        sent_at=sent_at,
        correlation_data=None if correlation_data is None else bytes(correlation_data),
        binary=True,
    )


def decode_request(
    payload: bytes,
    task: str,
    known_tasks: Collection[str],
    max_bytes: int = MAX_REQUEST_BYTES,
    *,
    content_type: str | None = None,
    response_topic: str | None = None,
    correlation_data: bytes | None = None,
    reply_rule: ReplyTopicRule = "requester",
) -> Request:
    """Validate and decode one request published on the request topic of `task`, in either
    form, told apart by its MQTT 5 content type or, without one, its first bytes.

    `response_topic` / `correlation_data` are the MQTT 5 properties of the message, when
    present: they stand in for a reply topic / id missing from the payload. `reply_rule` says
    which reply topics are valid (docs/protocol.md). Raises RequestError, and nothing else,
    for any input.
    """
    props = MessageProperties(response_topic, correlation_data, reply_rule)
    form = _decode_binary_request if is_binary(payload, content_type) else decode_json_request
    return form(payload, task, known_tasks, max_bytes, props)


def _text(view: memoryview, at: int, length: int, what: str, fail: Failure) -> tuple[str, int]:
    end = at + length
    if end > view.nbytes:
        fail("bad-data", f"the {what} runs past the end of the payload")
    try:
        return bytes(view[at:end]).decode("utf-8"), end
    except UnicodeDecodeError:
        fail("bad-field", f"the {what} is not UTF-8")


def _request_id(ident: str, prop_id: str | None, correlation_data: bytes | None, fail: Failure) -> str:
    if ident:
        if valid_id(ident) is None:
            fail("bad-field", f"the id must be 1-{MAX_ID_CHARS} characters, got {short(ident)}")
        return ident
    if prop_id is not None:
        return prop_id
    if correlation_data is not None:
        fail(
            "bad-field",
            f"Correlation Data must be UTF-8 of 1-{MAX_ID_CHARS} characters and at most {MAX_ID_BYTES} "
            "bytes (a binary reply carries the id whole) when the id is empty",
        )
    fail("missing-field", "the id is empty (and no MQTT 5 Correlation Data)")


def _reply_to(reply: str, response_topic: str | None, fail: Failure, rule: ReplyTopicRule) -> str:
    topic = reply or response_topic
    if topic is None:
        fail("missing-field", "the reply topic is empty (and no MQTT 5 Response Topic)")
    problem = reply_topic_problem(topic, rule)
    if problem is not None:
        fail("bad-field", f"the reply topic {problem}")
    return topic


# -- replies ---------------------------------------------------------------------------------


def _reply(
    status: int,
    code: int,
    request_id: str | None,
    label: int,
    latency_ms: float,
    version: int,
    detail: str = "",
) -> bytes:
    ident = _id_bytes(request_id)
    text = detail[:MAX_DETAIL_CHARS].encode("utf-8")
    head = _REPLY_HEAD.pack(
        REPLY_MAGIC, PROTOCOL_VERSION, status, code, len(ident), len(text), label, latency_ms, version
    )
    return head + ident + text


def encode_binary_reply(request_id: str, label: int, latency_ms: float, model_version: int) -> bytes:
    """An answer in the binary form (the task is the request's; the requester knows it)."""
    check_answer(label, latency_ms)
    return _reply(0, 0, request_id, int(label), float(latency_ms), int(model_version))


def encode_binary_rejection(request_id: str, reason: RejectReason) -> bytes:
    check_listed("rejection reason", reason, _REASONS)
    return _reply(1, _REASONS.index(reason), request_id, 0, 0.0, 0)


def encode_binary_error(request_id: str | None, code: str, detail: str) -> bytes:
    check_listed("error code", code, _CODES)
    return _reply(2, _CODES.index(code), request_id, 0, 0.0, 0, detail)


def decode_binary_records(payload: bytes) -> list[Reply | ProtocolError]:
    """Each record of a binary reply payload: its Reply, or the ProtocolError of a record whose
    contents are bad (its header still says where the next record starts). A payload whose
    framing is broken (no record, a bad magic or version, a record running past the end)
    raises ProtocolError, and nothing else."""
    view = memoryview(payload)
    records: list[Reply | ProtocolError] = []
    at = 0
    while at < view.nbytes or not records:
        start, end, fields = _record_frame(view, at)
        try:
            records.append(_record(view, start, end, fields))
        except ProtocolError as exc:
            records.append(exc)
        at = end
    return records


def decode_binary_replies(payload: bytes) -> list[Reply]:
    """The readable reply records of a binary reply payload (requester side): a bad record is
    skipped (and logged) so it does not cost the others; raises ProtocolError, and nothing
    else, when the framing is broken or no record is readable."""
    records = decode_binary_records(payload)
    replies = [r for r in records if isinstance(r, Reply)]
    problems = [r for r in records if isinstance(r, ProtocolError)]
    if not replies:
        raise problems[0]
    for problem in problems:
        log.warning("skipped an unreadable binary reply record: %s", problem)
    return replies


def decode_binary_reply(payload: bytes) -> Reply:
    """A binary reply payload of exactly one record."""
    records = decode_binary_records(payload)
    if len(records) != 1:
        raise ProtocolError("bad-data", f"expected one binary reply, got {len(records)}")
    if isinstance(records[0], ProtocolError):
        raise records[0]
    return records[0]


_Fields = tuple[int, int, int, int, float, int]


def _record_frame(view: memoryview, at: int) -> tuple[int, int, _Fields]:
    """Where one record's id and detail start and end, and its other header fields."""
    if view.nbytes - at < _REPLY_HEAD.size:
        raise ProtocolError("bad-data", f"a binary reply record needs a {_REPLY_HEAD.size}-byte header")
    fields = _REPLY_HEAD.unpack_from(view, at)
    magic, version, status, code, id_len, detail_len, label, latency_ms, model_version = fields
    if magic != REPLY_MAGIC or version != PROTOCOL_VERSION:
        raise ProtocolError("bad-data", f"not a v{PROTOCOL_VERSION} binary reply (magic or version)")
    start = at + _REPLY_HEAD.size
    end = start + id_len + detail_len
    if end > view.nbytes:
        raise ProtocolError("bad-data", "a binary reply record runs past the end of the payload")
    return start, end, (status, code, id_len, label, latency_ms, model_version)


def _record(view: memoryview, start: int, end: int, fields: _Fields) -> Reply:
    status, code, id_len, label, latency_ms, model_version = fields
    if status >= len(_STATUSES):
        raise ProtocolError("bad-field", f"a binary reply record has an unknown status {status}")
    try:
        ident = bytes(view[start : start + id_len]).decode("utf-8") or None
        detail = bytes(view[start + id_len : end]).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("bad-field", "a binary reply's id or detail is not UTF-8") from None
    kind = _STATUSES[status]
    if kind == "ok":
        return Reply(ident, "ok", label=label, latency_ms=float(latency_ms), model_version=str(model_version))
    names = _REASONS if kind == "rejected" else _CODES
    if code >= len(names):
        raise ProtocolError("bad-field", f"a binary {kind} reply has an unknown code {code}")
    if kind == "rejected":
        return Reply(ident, "rejected", reason=names[code])
    return Reply(ident, "error", code=names[code], detail=detail)


def decode_any_replies(payload: bytes, content_type: str | None = None) -> list[Reply]:
    """The replies of one message in either form (a binary one may hold several); raises
    ProtocolError, and nothing else."""
    if is_binary(payload, content_type):
        return decode_binary_replies(payload)
    return [decode_reply(payload)]


def decode_any_reply(payload: bytes, content_type: str | None = None) -> Reply:
    """A one-reply message in either form (requester side)."""
    return decode_binary_reply(payload) if is_binary(payload, content_type) else decode_reply(payload)
