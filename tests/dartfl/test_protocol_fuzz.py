"""The request plane's decoders fuzzed: on any payload, task and MQTT 5 properties they raise
ProtocolError and nothing else, and the agent can always encode its error reply."""

from __future__ import annotations

import base64
import contextlib
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dartfl import protocol as p
from dartfl.errors import ProtocolError
from tests.dartfl.protocol_fixtures import IMAGE, MQTT5_REPLY, REPLY, TASKS, valid_obj

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
