"""The request plane's wire protocol: topics, codecs, every error code, and a fuzzed decoder."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dartfl import protocol as p
from dartfl.errors import ConfigError, InputError, ProtocolError
from dartfl.profiles import get_profile

TASKS = frozenset({"mnist", "fashion", "digits"})
REPLY = "dartfl/v1/_reply/tester"
MQTT5_REPLY = "dartfl/v1/_reply/mqtt5-tester/7f3a"
IMAGE = np.arange(784, dtype=np.uint8).reshape(28, 28)


def valid_obj(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(p.encode_request("r-1", IMAGE, REPLY, sent_at=12.5))
    obj.update(changes)
    return obj


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def error_of(payload: bytes, task: str = "mnist", **kwargs: Any) -> p.RequestError:
    with pytest.raises(p.RequestError) as info:
        p.decode_request(payload, task, TASKS, **kwargs)
    return info.value


# --- topics ---------------------------------------------------------------------------------


def test_topics_follow_the_v1_layout() -> None:
    assert p.request_topic("pi-01", "mnist") == "dartfl/v1/pi-01/req/mnist"
    assert p.request_subscription("pi-01") == "dartfl/v1/pi-01/req/+"
    assert p.telemetry_topic("pi-01") == "dartfl/v1/pi-01/telemetry"
    assert p.status_topic("pi-01") == "dartfl/v1/pi-01/status"
    assert p.reply_topic("replayer") == "dartfl/v1/_reply/replayer"
    assert p.reply_topic("replayer", "3f9a") == "dartfl/v1/_reply/replayer/3f9a"
    assert p.parse_request_topic(p.request_topic("pi-01", "mnist")) == ("pi-01", "mnist")


@pytest.mark.parametrize("name", ["", "a/b", "+", "#", "_x", "$SYS", "x" * 65, "naïve"])
def test_topic_helpers_reject_names_that_are_not_plain_topic_levels(name: str) -> None:
    with pytest.raises(ConfigError, match="A-Za-z0-9"):
        p.request_topic(name, "mnist")
    with pytest.raises(ConfigError):
        p.request_topic("pi", name)


@pytest.mark.parametrize(
    "topic", ["dartfl/v1/pi/req", "dartfl/v2/pi/req/mnist", "dartfl/v1/pi/reqs/mnist", "dartfl/v1//req/x", ""]
)
def test_parse_request_topic_rejects_other_topics(topic: str) -> None:
    with pytest.raises(ProtocolError) as info:
        p.parse_request_topic(topic)
    assert info.value.code == "bad-topic"


def test_parse_request_topic_leaves_task_checking_to_the_decoder() -> None:
    assert p.parse_request_topic("dartfl/v1/pi/req/no such task") == ("pi", "no such task")
    # `req/` matches the agent's `req/+`: the requester gets an unknown-task reply, not silence.
    assert p.parse_request_topic("dartfl/v1/pi/req/") == ("pi", "")


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


# --- the reply rule: replies go to dartfl/v1/_reply/<requester>/... only ----------------------

# Topics the first v1 rule let a requester choose (not device topics), and so had any device
# publish to for whoever asked: reply reflection.
REFLECTED = ["alerts/door", "dartfl/v1/replay/3f9a/reply", "dartfl/v2/pi/req/mnist", "dartfl/v1/_reply"]


@pytest.mark.parametrize("topic", REFLECTED)
def test_a_reply_topic_outside_the_reply_namespace_is_refused_and_not_answered(topic: str) -> None:
    err = error_of(raw(valid_obj(reply_to=topic)))
    assert err.code == "bad-field" and "dartfl/v1/_reply/<requester>/" in err.detail
    assert err.reply_to is None  # no error reply goes there either
    err = error_of(b"garbage", response_topic=topic, correlation_data=b"c-1")
    assert (err.code, err.reply_to) == ("bad-json", None)


@pytest.mark.parametrize("topic", REFLECTED)
def test_the_any_rule_keeps_the_first_v1_reply_topics_for_a_transition(topic: str) -> None:
    request = p.decode_request(raw(valid_obj(reply_to=topic)), "mnist", TASKS, reply_rule="any")
    assert request.reply_to == topic


@pytest.mark.parametrize("rule", p.REPLY_TOPIC_RULES)
def test_device_topics_stay_refused_as_reply_topics_under_either_rule(rule: p.ReplyTopicRule) -> None:
    for topic in ("dartfl/v1/pi/req/mnist", "dartfl/v1/pi/status", "dartfl/v1/_reply/telemetry"):
        assert p.reply_topic_problem(topic, rule) is not None, topic


def test_reply_topics_under_a_requester_name_are_valid() -> None:
    for topic in (REPLY, p.reply_topic("replayer", "3f9a"), "dartfl/v1/_reply/app-1/a/b"):
        assert p.reply_topic_problem(topic) is None, topic
    assert p.reply_topic_problem("dartfl/v1/_reply/_x/a") is not None  # not a name


@pytest.mark.parametrize("name", ["req", "telemetry", "status"])
def test_requester_names_that_are_device_topic_levels_are_reserved(name: str) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        p.reply_topic(name, "x")


def test_encode_request_keeps_to_the_reply_rule() -> None:
    with pytest.raises(InputError, match="_reply"):
        p.encode_request("r", IMAGE, "alerts/door")


# --- replies --------------------------------------------------------------------------------


def test_ok_reply_round_trip() -> None:
    reply = p.decode_reply(p.encode_reply("r-1", "mnist", np.int64(7), 3.25, 4))  # type: ignore[arg-type]
    assert reply == p.Reply(id="r-1", status="ok", task="mnist", label=7, latency_ms=3.25, model_version="4")


@pytest.mark.parametrize("reason", ["queue-full", "shutting-down"])
def test_rejection_round_trip(reason: p.RejectReason) -> None:
    reply = p.decode_reply(p.encode_rejection("r-2", reason, task="digits"))
    assert (reply.id, reply.status, reply.reason, reply.task, reply.label) == (
        "r-2",
        "rejected",
        reason,
        "digits",
        None,
    )


def test_error_reply_round_trip_from_a_decoder_error() -> None:
    err = error_of(raw(valid_obj(shape=[1, 1])))
    reply = p.decode_reply(p.encode_error(err.correlation_id, err.code, err.detail))
    assert (reply.id, reply.status, reply.code) == ("r-1", "error", "bad-shape")
    assert reply.detail is not None and "28" in reply.detail
    anonymous = p.decode_reply(p.encode_error(None, "bad-json", "x" * 1000))
    assert anonymous.id is None and anonymous.detail == "x" * 256


def test_reply_encoders_check_their_inputs() -> None:
    with pytest.raises(InputError):
        p.encode_rejection("r", "busy")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        p.encode_error("r", "no-such-code", "x")
    with pytest.raises(InputError):
        p.encode_reply("r", "mnist", True, 1.0, "v")
    with pytest.raises(InputError):
        p.encode_reply("r", "mnist", 1, float("inf"), "v")


@pytest.mark.parametrize(
    "obj",
    [
        {"v": 1, "status": "maybe", "id": "r"},
        {"v": 1, "status": "ok", "id": "r"},
        {"v": 1, "status": "ok", "id": "r", "label": "3"},
        {"v": 1, "status": "ok", "id": "r", "label": 3, "latency_ms": -1},
        {"v": 1, "status": "rejected", "id": "r"},
        {"v": 1, "status": "error"},
        {"v": 2, "status": "ok", "id": "r", "label": 3},
    ],
)
def test_decode_reply_rejects_malformed_replies(obj: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        p.decode_reply(raw(obj))


# --- telemetry and status -------------------------------------------------------------------


def _snapshot(**changes: Any) -> p.Telemetry:
    values: dict[str, Any] = {
        "device": "pi-01",
        "t": 1_700_000_000.5,
        "tasks": ("mnist", "fashion"),
        "backlog": {"mnist": 3, "fashion": 0},
        "inference_share": 0.5,
        "task_shares": {"mnist": 0.25, "fashion": 0.75},
        "uptime_s": 10.0,
        "inference_busy_s": 2.5,
        "training_busy_s": 6.0,
        "training_busy_s_per_task": {"mnist": 1.5, "fashion": 4.5},
        "idle_s": 1.5,
        "latency_ms": p.LatencyWindow(1.5, None, None),
        "round": p.RoundProgress(target=64, trained=10, elapsed_s=1.0, length_s=8.0, done=2, met=None),
        "profile": get_profile("pi4"),
    }
    values.update(changes)
    return p.Telemetry(**values)


def test_telemetry_round_trips_through_the_wire() -> None:
    snapshot = _snapshot()
    got = p.decode_telemetry(p.encode_telemetry(snapshot), "dartfl/v1/pi-01/telemetry")
    assert got == snapshot
    wire = json.loads(p.encode_telemetry(snapshot))
    assert wire["v"] == 1 and wire["latency_ms"] == {"p50_ms": 1.5, "p95_ms": None, "p99_ms": None}
    report = p.FinalReport.of(snapshot, drained=5, rejected_at_shutdown=2)
    assert p.FinalReport.from_json(report.to_json()) == report


def test_a_decoder_ignores_fields_a_newer_device_adds_and_missing_optional_ones() -> None:
    got = p.decode_telemetry(raw({"v": 1, "device": "pi", "t": 3, "future_field": [1, 2], "policy": None}))
    assert got == p.Telemetry("pi", 3.0)


@pytest.mark.parametrize(
    "changes",
    [
        {"t": float("nan")},
        {"t": 9.9e9 * 2},
        {"device": "a/b"},
        {"inference_share": 7.5},
        {"slo_attainment_window": -3.0},
        {"backlog": {"mnist": -1}},
        {"backlog": {"mnist": 1.5}},
        {"task_shares": {"mnist": 2.0}},
        {"train_samples": True},
        {"training_busy_s_per_task": {"mnist": -1.0}},
        {"training_busy_s_per_task": {"not a task!": 1.0}},
        {"idle_s": -0.5},
        {"policy": "x" * 300},
        {"tasks": ("ok", "not ok")},
    ],
)
def test_out_of_range_telemetry_is_refused_on_both_sides_of_the_wire(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _snapshot(**changes)
    obj = {**_snapshot().to_json(), **{k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()}}
    with pytest.raises(ProtocolError):
        p.decode_telemetry(json.dumps(obj, allow_nan=True).encode())


def test_decode_telemetry_requires_version_device_and_time_and_bounds_its_size() -> None:
    for obj in (
        {"device": "pi", "t": 1},
        {"v": 1, "t": 1},
        {"v": 1, "device": "pi"},
        {"v": 1, "device": "pi", "t": "x"},
        {"v": 1, "device": "pi", "t": 1, "policy": "x" * p.MAX_DEVICE_MESSAGE_BYTES},
    ):
        with pytest.raises(ProtocolError):
            p.decode_telemetry(raw(obj))


def test_status_round_trip_and_will_payload() -> None:
    profile = get_profile("pi4")
    online = p.decode_status(p.encode_status(p.DeviceStatus("pi", True, 5.0, profile)))
    assert online == p.DeviceStatus("pi", True, 5.0, profile)
    assert json.loads(p.encode_status(online))["profile"]["name"] == "pi4"
    will = p.DeviceStatus("pi", False)
    assert p.decode_status(p.encode_status(will)) == will
    report = p.FinalReport("pi", 6.0, drained=3)
    stopped = p.DeviceStatus("pi", False, 6.0, profile, report, "the agent failed")
    assert p.decode_status(p.encode_status(stopped)) == stopped
    with pytest.raises(ProtocolError):
        p.decode_status(raw({"v": 1, "device": "pi", "state": "gone"}))
    with pytest.raises(ProtocolError, match="profile"):
        p.decode_status(raw({"v": 1, "device": "pi", "state": "online", "profile": {"name": "x"}}))


# --- fuzzing: the decoders raise ProtocolError and nothing else -----------------------------

_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)
_field_values = st.one_of(
    _json,
    st.just([28, 28]),
    st.just("uint8"),
    st.just(1),
    st.just(REPLY),
    st.just(base64.b64encode(bytes(784)).decode()),
    st.text(alphabet="ABCDabcd0123+/=", max_size=1100),
)
_request_like = st.fixed_dictionaries(
    {}, optional={k: _field_values for k in ("v", "id", "reply_to", "shape", "dtype", "data", "sent_at")}
)
_VALID = p.encode_request("r-1", IMAGE, REPLY, sent_at=1.0)


@st.composite
def _mutated_valid(draw: st.DrawFn) -> bytes:
    data = bytearray(_VALID)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "delete" and data:
            del data[i]
        elif op == "insert":
            data.insert(i, draw(st.integers(0, 255)))
        else:
            del data[i:]
    return bytes(data)


@st.composite
def _field_swapped(draw: st.DrawFn) -> bytes:
    obj = valid_obj()
    key = draw(st.sampled_from(sorted(obj)))
    if draw(st.booleans()):
        del obj[key]
    else:
        obj[key] = draw(_field_values)
    return json.dumps(obj).encode()


@st.composite
def _data_mutated(draw: st.DrawFn) -> bytes:
    """Valid JSON whose base64 pixels are edited: exercises the last checks and success."""
    obj = valid_obj()
    chars = list(obj["data"])
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(chars) - 1))
        chars[i] = draw(st.sampled_from("A/+=-_ \n*é"))
    obj["data"] = "".join(chars)[: draw(st.sampled_from([None, 1044, 1048, 1052]))]
    return json.dumps(obj).encode()


_payloads = st.one_of(
    st.binary(max_size=2000),
    _json.map(lambda v: json.dumps(v).encode()),
    _request_like.map(lambda v: json.dumps(v).encode()),
    _mutated_valid(),
    _field_swapped(),
    _data_mutated(),
)


def _check_total(payload: bytes, task: str, response_topic: str | None, correlation: bytes | None) -> None:
    try:
        request = p.decode_request(
            payload, task, TASKS, response_topic=response_topic, correlation_data=correlation
        )
    except p.RequestError as err:
        event(err.code)
        assert err.code in p.ERROR_CODES
        assert err.correlation_id is None or 0 < len(err.correlation_id) <= p.MAX_ID_CHARS
        assert err.reply_to is None or isinstance(err.reply_to, str)
        # the agent must always be able to encode its error reply
        p.decode_reply(p.encode_error(err.correlation_id, err.code, err.detail))
    else:
        event("decoded")
        assert request.image.shape == (28, 28) and request.image.dtype == np.uint8
        assert 0 < len(request.id) <= p.MAX_ID_CHARS and request.task in TASKS
        p.encode_reply(request.id, request.task, 0, 0.0, "v")


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=_payloads,
    task=st.sampled_from([*sorted(TASKS), "cifar", ""]),
    response_topic=st.none() | st.text(max_size=30) | st.just(MQTT5_REPLY) | st.just("my/replies"),
    correlation=st.none() | st.binary(max_size=70) | st.just(b"c-1"),
)
def test_decode_request_never_raises_anything_but_request_error(
    payload: bytes, task: str, response_topic: str | None, correlation: bytes | None
) -> None:
    _check_total(payload, task, response_topic, correlation)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(payload=st.binary(max_size=500) | _json.map(lambda v: json.dumps(v).encode()) | _mutated_valid())
def test_decode_reply_telemetry_and_status_never_raise_anything_but_protocol_error(payload: bytes) -> None:
    for decode in (p.decode_reply, p.decode_telemetry, p.decode_status):
        with contextlib.suppress(ProtocolError):
            decode(payload)


def test_a_status_says_which_request_forms_its_device_decodes() -> None:
    both = p.DeviceStatus("pi", True, 1.0, payloads=("json", "binary"))
    assert p.decode_status(p.encode_status(both)).payloads == ("json", "binary")
    older = p.decode_status(raw({"v": 1, "device": "pi", "state": "online"}))
    assert older.payloads == ("json",)  # a device that says nothing speaks JSON
    newer = p.decode_status(raw({"v": 1, "device": "pi", "state": "online", "payloads": ["json", "cbor"]}))
    assert newer.payloads == ("json",)  # a form this side does not know is ignored, not an error
    with pytest.raises(ConfigError):
        p.DeviceStatus("pi", True, payloads=("binary",))  # JSON is always spoken
