"""What a device publishes on the request plane: replies (ok, rejected, error), telemetry
snapshots checked on both sides of the wire, and the status with its last will and the
request forms it decodes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from dartfl import protocol as p
from dartfl.errors import ConfigError, InputError, ProtocolError
from dartfl.profiles import get_profile
from tests.dartfl.protocol_fixtures import error_of, raw, valid_obj

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


def test_a_status_says_which_request_forms_its_device_decodes() -> None:
    both = p.DeviceStatus("pi", True, 1.0, payloads=("json", "binary"))
    assert p.decode_status(p.encode_status(both)).payloads == ("json", "binary")
    older = p.decode_status(raw({"v": 1, "device": "pi", "state": "online"}))
    assert older.payloads == ("json",)  # a device that says nothing speaks JSON
    newer = p.decode_status(raw({"v": 1, "device": "pi", "state": "online", "payloads": ["json", "cbor"]}))
    assert newer.payloads == ("json",)  # a form this side does not know is ignored, not an error
    with pytest.raises(ConfigError):
        p.DeviceStatus("pi", True, payloads=("binary",))  # JSON is always spoken
