"""The request plane's JSON requests: round trips, MQTT 5 properties standing in for missing
fields, the encoder's checks, and every error code the decoder raises, with the id and reply
topic it recovers for the error reply."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from dartfl import protocol as p
from dartfl.errors import InputError, ProtocolError
from tests.dartfl.protocol_fixtures import IMAGE, MQTT5_REPLY, REPLY, TASKS, error_of, raw, valid_obj

# --- requests: round trip -------------------------------------------------------------------


def test_request_round_trip_keeps_every_field() -> None:
    request = p.decode_request(p.encode_request("r-1", IMAGE, REPLY, sent_at=12.5), "mnist", TASKS)
    assert (request.id, request.task, request.reply_to, request.sent_at) == ("r-1", "mnist", REPLY, 12.5)
    assert request.correlation_data is None
    np.testing.assert_array_equal(request.image, IMAGE)
    assert request.image.dtype == np.uint8 and not request.image.flags.writeable


def test_request_payload_is_compact_json_with_base64_pixels() -> None:
    payload = p.encode_request("r-1", IMAGE, REPLY)
    obj = json.loads(payload)
    assert set(obj) == {"v", "id", "reply_to", "shape", "dtype", "data"}
    assert obj["v"] == 1 and obj["shape"] == [28, 28] and obj["dtype"] == "uint8"
    assert base64.b64decode(obj["data"]) == IMAGE.tobytes()
    assert len(payload) < 1200


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    request = p.decode_request(raw(valid_obj(priority="high")), "mnist", TASKS)
    assert request.id == "r-1"


def test_mqtt5_properties_stand_in_for_missing_id_and_reply_to() -> None:
    obj = valid_obj()
    del obj["id"], obj["reply_to"]
    request = p.decode_request(raw(obj), "mnist", TASKS, response_topic=MQTT5_REPLY, correlation_data=b"c-9")
    assert (request.id, request.reply_to, request.correlation_data) == ("c-9", MQTT5_REPLY, b"c-9")


def test_payload_fields_win_over_mqtt5_properties() -> None:
    request = p.decode_request(
        raw(valid_obj()), "mnist", TASKS, response_topic=MQTT5_REPLY, correlation_data=b"\x00\xff"
    )
    assert (request.id, request.reply_to) == ("r-1", REPLY)
    assert request.correlation_data == b"\x00\xff"  # still echoed raw on an MQTT 5 reply


@pytest.mark.parametrize(
    ("request_id", "image", "reply_to", "sent_at"),
    [
        pytest.param("x" * 65, IMAGE, REPLY, None, id="id-too-long"),
        pytest.param("r", IMAGE, "a/+/b", None, id="wildcard-reply-topic"),
        pytest.param("r", IMAGE.astype(np.float32), REPLY, None, id="float32-image"),
        pytest.param("r", IMAGE[:27], REPLY, None, id="short-image"),
        pytest.param("r", IMAGE, REPLY, float("nan"), id="nan-sent-at"),
    ],
)
def test_encode_request_refuses_what_the_decoder_would_reject(
    request_id: str, image: np.ndarray, reply_to: str, sent_at: float | None
) -> None:
    with pytest.raises(InputError):
        p.encode_request(request_id, image, reply_to, sent_at=sent_at)


# --- requests: every error code -------------------------------------------------------------

ERROR_CASES: list[tuple[str, bytes]] = [
    ("oversized-payload", raw(valid_obj(pad="x" * 20000))),
    ("bad-json", b"\xff\xfe not utf-8"),
    ("bad-json", b'{"v": 1, '),
    ("bad-json", b"[1, 2, 3]"),
    ("bad-json", b"[" * 5000),  # nesting deeper than the JSON parser's recursion limit
    ("bad-json", b'{"v": ' + b"9" * 5000 + b"}"),  # an integer longer than Python parses
    ("unsupported-version", raw(valid_obj(v=2))),
    ("bad-field", raw(valid_obj(v="1"))),
    ("missing-field", raw({k: v for k, v in valid_obj().items() if k != "v"})),
    ("missing-field", raw({k: v for k, v in valid_obj().items() if k != "id"})),
    ("missing-field", raw({k: v for k, v in valid_obj().items() if k != "reply_to"})),
    ("missing-field", raw({k: v for k, v in valid_obj().items() if k != "shape"})),
    ("missing-field", raw({k: v for k, v in valid_obj().items() if k != "dtype"})),
    ("missing-field", raw({k: v for k, v in valid_obj().items() if k != "data"})),
    ("bad-field", raw(valid_obj(id=7))),
    ("bad-field", raw(valid_obj(id=""))),
    ("bad-field", raw(valid_obj(id="x" * 65))),
    ("bad-field", raw(valid_obj(reply_to=["a"]))),
    ("bad-field", raw(valid_obj(reply_to="replies/#"))),
    ("bad-field", raw(valid_obj(reply_to="$SYS/x"))),
    ("bad-field", raw(valid_obj(reply_to="dartfl/v1/pi/req/mnist"))),
    ("bad-field", raw(valid_obj(sent_at="now"))),
    ("bad-field", raw(valid_obj(sent_at=True))),
    (
        "bad-field",
        b'{"v":1,"id":"a","reply_to":"dartfl/v1/_reply/r","shape":[28,28],"dtype":"uint8","data":"'
        + base64.b64encode(bytes(784))
        + b'","sent_at":1e999}',
    ),
    ("bad-shape", raw(valid_obj(shape=[28]))),
    ("bad-shape", raw(valid_obj(shape=[28, 27]))),
    ("bad-shape", raw(valid_obj(shape=[28.0, 28.0]))),
    ("bad-shape", raw(valid_obj(shape="28x28"))),
    ("bad-dtype", raw(valid_obj(dtype="float32"))),
    ("bad-dtype", raw(valid_obj(dtype=None))),
    ("bad-data", raw(valid_obj(data="!!!not base64!!!"))),
    ("bad-data", raw(valid_obj(data="AAAA"))),
    ("bad-data", raw(valid_obj(data=base64.b64encode(bytes(785)).decode()))),
    ("bad-data", raw(valid_obj(data=123))),
    ("bad-data", raw(valid_obj(data="ÄÖÜ"))),
]


@pytest.mark.parametrize(
    ("code", "payload"), ERROR_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(ERROR_CASES)]
)
def test_each_malformation_maps_to_its_error_code(code: str, payload: bytes) -> None:
    err = error_of(payload)
    assert err.code == code, err
    assert isinstance(err, ProtocolError) and code in p.ERROR_CODES
    assert str(err).startswith(f"{code}: ")


def test_every_error_code_is_exercised() -> None:
    assert {code for code, _ in ERROR_CASES} | {"unknown-task"} == p.ERROR_CODES


def test_unknown_task_is_reported_with_the_known_ones() -> None:
    err = error_of(raw(valid_obj()), task="cifar")
    assert err.code == "unknown-task" and "digits" in err.detail
    assert (err.correlation_id, err.reply_to) == ("r-1", REPLY)


def test_errors_carry_the_recovered_id_and_reply_topic() -> None:
    err = error_of(raw(valid_obj(dtype="float64")))
    assert (err.code, err.correlation_id, err.reply_to) == ("bad-dtype", "r-1", REPLY)
    err = error_of(raw(valid_obj(id=["x"])))
    assert (err.correlation_id, err.reply_to) == (None, REPLY)


def test_unparsable_payload_falls_back_to_mqtt5_properties_for_the_error_reply() -> None:
    err = error_of(b"garbage", response_topic=MQTT5_REPLY, correlation_data=b"c-1")
    assert (err.code, err.correlation_id, err.reply_to) == ("bad-json", "c-1", MQTT5_REPLY)
    err = error_of(b"garbage")
    assert (err.correlation_id, err.reply_to) == (None, None)


def test_max_bytes_is_configurable() -> None:
    payload = p.encode_request("r", IMAGE, REPLY)
    with pytest.raises(p.RequestError, match="oversized-payload"):
        p.decode_request(payload, "mnist", TASKS, max_bytes=len(payload) - 1)
    assert p.decode_request(payload, "mnist", TASKS, max_bytes=len(payload)).id == "r"


def test_binary_correlation_data_cannot_stand_in_for_a_missing_id() -> None:
    obj = valid_obj()
    del obj["id"]
    err = error_of(raw(obj), correlation_data=b"\xff\xfe")
    assert err.code == "bad-field"
