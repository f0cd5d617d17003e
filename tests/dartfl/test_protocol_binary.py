"""The binary form of requests and replies: round trips, every error code it can raise, the
form told apart by content type or first bytes, and a fuzzed decoder that raises only
ProtocolError."""

from __future__ import annotations

import contextlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dartfl import protocol as p
from dartfl.errors import InputError, ProtocolError

TASKS = frozenset({"mnist", "fashion"})
REPLY = "dartfl/v1/_reply/tester"
IMAGE = np.arange(784, dtype=np.uint8).reshape(28, 28)


def _error(payload: bytes, **kwargs: object) -> p.RequestError:
    with pytest.raises(p.RequestError) as info:
        p.decode_request(payload, "mnist", TASKS, content_type=p.REQUEST_CONTENT_TYPE, **kwargs)  # type: ignore[arg-type]
    return info.value


def test_a_binary_request_round_trips_and_is_about_two_fifths_of_the_json_one() -> None:
    payload = p.encode_binary_request("r-7", IMAGE, REPLY, sent_at=12.5)
    got = p.decode_request(payload, "mnist", TASKS)
    assert (got.id, got.reply_to, got.sent_at, got.binary) == ("r-7", REPLY, 12.5, True)
    assert np.array_equal(got.image, IMAGE) and not got.image.flags.writeable
    assert len(payload) < 0.75 * len(p.encode_request("r-7", IMAGE, REPLY, sent_at=12.5))


def test_the_mqtt5_properties_stand_in_for_an_empty_id_and_reply_topic() -> None:
    payload = p.encode_binary_request("", IMAGE)
    got = p.decode_request(payload, "mnist", TASKS, response_topic=REPLY, correlation_data=b"c-1")
    assert (got.id, got.reply_to, got.correlation_data) == ("c-1", REPLY, b"c-1")


def test_either_form_is_recognised_by_content_type_or_first_bytes() -> None:
    binary, text = p.encode_binary_request("a", IMAGE, REPLY), p.encode_request("a", IMAGE, REPLY)
    assert p.decode_request(binary, "mnist", TASKS).binary
    assert not p.decode_request(text, "mnist", TASKS).binary
    assert p.decode_request(binary, "mnist", TASKS, content_type=p.REQUEST_CONTENT_TYPE).binary
    with pytest.raises(ProtocolError):  # a JSON payload labelled binary is refused, not guessed at
        p.decode_request(text, "mnist", TASKS, content_type=p.REQUEST_CONTENT_TYPE)


def _with(field: int, value: int) -> bytes:
    """A valid binary request with one header byte replaced."""
    raw = bytearray(p.encode_binary_request("r-1", IMAGE, REPLY))
    raw[field] = value
    return bytes(raw)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"DR\x01", "bad-data"),
        (_with(2, 9), "unsupported-version"),
        (_with(7, 0)[:7] + struct.pack(">HH", 27, 28) + _with(7, 0)[11:], "bad-shape"),
        (_with(11, 4), "bad-dtype"),
        (p.encode_binary_request("r-1", IMAGE, REPLY)[:-1], "bad-data"),
        (p.encode_binary_request("", IMAGE, REPLY), "missing-field"),
        (p.encode_binary_request("r-1", IMAGE), "missing-field"),
        (b"XX" + p.encode_binary_request("r-1", IMAGE, REPLY)[2:], "bad-data"),
        (p.encode_binary_request("r-1", IMAGE, REPLY) + b"\x00" * 20000, "oversized-payload"),
    ],
)
def test_every_bad_binary_request_gets_its_error_code(payload: bytes, code: str) -> None:
    assert _error(payload).code == code


def test_a_bad_binary_request_keeps_its_id_and_reply_topic_for_the_error_reply() -> None:
    err = _error(_with(11, 4))
    assert (err.correlation_id, err.reply_to) == ("r-1", REPLY)
    other_task = p.encode_binary_request("r-2", IMAGE, REPLY)
    with pytest.raises(p.RequestError) as info:
        p.decode_request(other_task, "digits", TASKS)
    assert info.value.code == "unknown-task" and info.value.reply_to == REPLY


@pytest.mark.parametrize(
    ("request_id", "image", "reply_to"),
    [
        pytest.param("x" * 65, IMAGE, REPLY, id="id-too-long"),
        pytest.param("r", IMAGE, "dartfl/v1/dev/req/mnist", id="request-topic-as-reply-topic"),
        pytest.param("r", IMAGE.astype(np.int16), REPLY, id="int16-image"),
    ],
)
def test_the_encoder_refuses_what_the_decoder_would(
    request_id: str, image: np.ndarray, reply_to: str
) -> None:
    with pytest.raises(InputError):
        p.encode_binary_request(request_id, image, reply_to)


def test_binary_replies_round_trip_in_all_three_kinds() -> None:
    ok = p.decode_any_reply(p.encode_binary_reply("r-1", 7, 3.5, 4))
    assert (ok.status, ok.id, ok.label, ok.latency_ms, ok.model_version) == ("ok", "r-1", 7, 3.5, "4")
    rejected = p.decode_any_reply(p.encode_binary_rejection("r-2", "queue-full"))
    assert (rejected.status, rejected.reason) == ("rejected", "queue-full")
    error = p.decode_any_reply(p.encode_binary_error(None, "bad-dtype", "uint8 please"))
    assert (error.status, error.id, error.code, error.detail) == ("error", None, "bad-dtype", "uint8 please")
    assert p.decode_any_reply(p.encode_reply("r-3", "mnist", 1, 1.0, "2")).label == 1  # JSON still reads


def test_answers_come_in_the_requests_own_form() -> None:
    binary, content_type = p.answer(True, "r", "mnist", 3, 1.0, 2)
    assert content_type == p.REPLY_CONTENT_TYPE and p.decode_binary_reply(binary).label == 3
    text, none = p.refusal(False, "r", "shutting-down", "mnist")
    assert none is None and p.decode_reply(text).reason == "shutting-down"


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(
    payload=st.binary(max_size=1200)
    | st.builds(
        lambda b, i: b[:i] + b[i + 1 :],
        st.just(p.encode_binary_request("r", IMAGE, REPLY)),
        st.integers(0, 900),
    ),
    task=st.sampled_from(["mnist", "digits", ""]),
)
def test_the_binary_decoders_raise_only_protocol_errors(payload: bytes, task: str) -> None:
    with contextlib.suppress(ProtocolError):
        p.decode_request(b"DR" + payload, task, TASKS)
    with contextlib.suppress(ProtocolError):
        p.decode_binary_reply(b"DA" + payload)


def test_several_binary_replies_travel_in_one_message() -> None:
    # A device answering a batch publishes the replies bound for one topic together.
    records = [
        p.encode_binary_reply("r-1", 3, 1.0, 2),
        p.encode_binary_error("r-2", "bad-shape", "28 x 28 please"),
        p.encode_binary_rejection("r-3", "queue-full"),
    ]
    replies = p.decode_any_replies(b"".join(records))
    assert [(r.id, r.status) for r in replies] == [("r-1", "ok"), ("r-2", "error"), ("r-3", "rejected")]
    assert replies[1].detail == "28 x 28 please"
    with pytest.raises(ProtocolError, match="expected one"):
        p.decode_binary_reply(b"".join(records))
    with pytest.raises(ProtocolError, match="past the end"):
        p.decode_any_replies(b"".join(records)[:-3])
    assert [r.label for r in p.decode_any_replies(p.encode_reply("r", "mnist", 4, 1.0, "1"))] == [4]
