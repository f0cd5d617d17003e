"""Hostile but legal input on the request plane: ids of many-byte characters in the binary
form come back whole (or the request is refused), one bad reply record does not cost the
others of its message, and an error reply never copies a junk task level back."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl import protocol as p
from dartfl.errors import InputError, ProtocolError

TASKS = frozenset({"mnist", "digits"})
REPLY = "dartfl/v1/_reply/tester"
IMAGE = np.zeros((28, 28), dtype=np.uint8)
# Legal ids (1-64 characters) whose UTF-8 is longer than 64 bytes.
WIDE_IDS = ["a" + "é" * 40, "é" * 40, "é" * 64, "\U0001f600" * 63]


def _served(payload: bytes, **props: object) -> p.Request:
    return p.decode_request(payload, "digits", TASKS, content_type=p.REQUEST_CONTENT_TYPE, **props)  # type: ignore[arg-type]


@pytest.mark.parametrize("ident", WIDE_IDS)
def test_an_accepted_binary_id_of_wide_characters_comes_back_exactly(ident: str) -> None:
    request = _served(p.encode_binary_request(ident, IMAGE, REPLY))
    assert request.id == ident
    for payload, _ in (
        p.answer(True, request.id, "digits", 3, 1.0, 2),
        p.refusal(True, request.id, "queue-full", "digits"),
        p.failure(True, request.id, "bad-data", "x", "digits"),
    ):
        assert p.decode_binary_reply(payload).id == ident


def test_a_correlation_id_too_long_for_a_binary_reply_is_refused_not_cut() -> None:
    ident = "\U0001f600" * 64  # 64 characters, 256 bytes: the id field holds 255
    with pytest.raises(p.RequestError) as info:
        _served(p.encode_binary_request("", IMAGE, REPLY), correlation_data=ident.encode())
    assert info.value.code == "bad-field" and info.value.correlation_id is None
    reply = p.decode_binary_reply(p.failure(True, info.value.correlation_id, "bad-field", "x", "digits")[0])
    assert reply.id is None
    # The JSON form has no such field, so the same id is fine there.
    assert p.decode_request(p.encode_request(ident, IMAGE, REPLY), "digits", TASKS).id == ident


def test_the_binary_encoders_refuse_an_id_they_cannot_carry_whole() -> None:
    too_wide = "\U0001f600" * 64
    with pytest.raises(InputError, match="255"):
        p.encode_binary_request(too_wide, IMAGE, REPLY)
    with pytest.raises(InputError, match="255"):
        p.encode_binary_reply(too_wide, 1, 1.0, 1)


def test_one_bad_record_does_not_spoil_the_others_of_its_message() -> None:
    good = [p.encode_binary_reply(f"good-{i}", i, 1.0, 1) for i in range(20)]
    # A record whose id is cut inside a character, as an older device sent it.
    ident = ("a" + "é" * 40).encode()[:64]
    bad = p.encode_binary_reply("x", 1, 1.0, 1)
    bad = bad[:5] + bytes([len(ident)]) + bad[6:-1] + ident  # the id length is byte 5
    records = p.decode_binary_records(b"".join([*good[:10], bad, *good[10:]]))
    assert isinstance(records[10], ProtocolError) and records[10].code == "bad-field"
    replies = p.decode_any_replies(b"".join([*good[:10], bad, *good[10:]]), p.REPLY_CONTENT_TYPE)
    assert [r.id for r in replies] == [f"good-{i}" for i in range(20)]
    with pytest.raises(ProtocolError, match="not UTF-8"):
        p.decode_binary_reply(bad)
    with pytest.raises(ProtocolError, match="not UTF-8"):
        p.decode_any_replies(bad)


def test_an_error_reply_to_a_junk_task_level_decodes_and_names_no_task() -> None:
    task = "x" * 60_000
    with pytest.raises(p.RequestError) as info:
        p.decode_request(p.encode_request("r-1", IMAGE, REPLY), task, TASKS)
    exc = info.value
    payload, _ = p.failure(False, exc.correlation_id, exc.code, exc.detail, task)
    reply = p.decode_reply(payload)
    assert (reply.id, reply.code, reply.task) == ("r-1", "unknown-task", None)
    assert len(payload) < 1024
    # A task name, known here or not, still goes back as it came.
    assert p.decode_reply(p.encode_error("r-1", "unknown-task", "no", task="mnist2")).task == "mnist2"
    assert p.decode_reply(p.encode_rejection("r-1", "queue-full", task="a b")).task is None
