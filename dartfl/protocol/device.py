"""What a device says about itself (docs/protocol.md): telemetry snapshots, its retained
online/offline status, and the final report it leaves in that status when it stops.

Each message is a frozen dataclass that validates itself, with one codec: `to_json` /
`from_json` for the object, `encode_*` / `decode_*` for the wire. The agent builds them, the
recorder, the dashboard and the replayer decode them, the tests use both. Every field but
`device` and `t` is optional (None or empty when a device does not report it); fields a newer
device adds within v1 are ignored by an older decoder. A decoder refuses (`bad-field`) any
value out of its range, so a lying or broken client cannot plant a share of 7.5 or a clock in
the year 2286 in a dashboard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, TypeVar

from dartfl.errors import ConfigError, InputError, ProtocolError
from dartfl.protocol.jsonwire import (
    Failure,
    check_version,
    dumps,
    finite,
    parse_object,
    refuse,
    short,
    unix_s,
)
from dartfl.protocol.profile_json import profile_from_json, profile_to_json
from dartfl.protocol.topics import PROTOCOL_VERSION, check_name, status_topic, telemetry_topic
from dartfl.types import DeviceProfile

__all__ = [
    "MAX_DEVICE_MESSAGE_BYTES",
    "DeviceStatus",
    "FinalReport",
    "LatencyWindow",
    "RoundProgress",
    "Telemetry",
    "decode_status",
    "decode_telemetry",
    "encode_status",
    "encode_telemetry",
]

PAYLOAD_FORMS: Final = ("json", "binary")
# A snapshot of a device with 64 tasks is about 12 KiB; anything much larger is not telemetry.
MAX_DEVICE_MESSAGE_BYTES: Final = 64 * 1024
MAX_TASKS: Final = 64
MAX_TEXT_CHARS: Final = 256
MAX_COUNT: Final = 2**53  # exact in a float, fits SQLite's integers

T = TypeVar("T")
# The snapshot's fields that map a task to a number.
_PER_TASK_FIELDS: Final = ("backlog", "task_shares", "train_samples_per_task", "training_busy_s_per_task")


# -- value checks (raise ConfigError; the decoder turns it into ProtocolError) -----------------


def _count(name: str, value: int | None) -> None:
    if value is not None and not (type(value) is int and 0 <= value < MAX_COUNT):
        raise ConfigError(f"{name} must be an integer count >= 0, got {short(value)}")


def _seconds(name: str, value: float | None) -> None:
    if value is not None and not (type(value) in (int, float) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be a finite number >= 0, got {short(value)}")


def _share(name: str, value: float | None) -> None:
    if value is not None and not (type(value) in (int, float) and 0.0 <= value <= 1.0):
        raise ConfigError(f"{name} must lie in [0, 1], got {short(value)}")


def _text(name: str, value: str | None) -> None:
    if value is not None and not (isinstance(value, str) and len(value) <= MAX_TEXT_CHARS):
        raise ConfigError(f"{name} must be text of at most {MAX_TEXT_CHARS} characters, got {short(value)}")


def _per_task(name: str, values: Mapping[str, Any], check: Callable[[str, Any], None]) -> None:
    if len(values) > MAX_TASKS:
        raise ConfigError(f"{name} has {len(values)} tasks; at most {MAX_TASKS}")
    for task, value in values.items():
        check_name("task", task)
        check(f"{name}[{task}]", value)


# -- the messages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyWindow:
    """Request latency (wait + service) over the telemetry window; None without replies."""

    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            _seconds(f"latency_ms.{f.name}", getattr(self, f.name))


@dataclass(frozen=True)
class RoundProgress:
    """The current FL round: its target and progress, and the rounds done and met so far."""

    target: int = 0
    trained: int = 0
    elapsed_s: float = 0.0
    length_s: float = 0.0
    done: int = 0
    met: int | None = None

    def __post_init__(self) -> None:
        for name in ("target", "trained", "done", "met"):
            _count(f"round.{name}", getattr(self, name))
        _seconds("round.elapsed_s", self.elapsed_s)
        _seconds("round.length_s", self.length_s)


@dataclass(frozen=True)
class Telemetry:
    """One snapshot of a device (docs/protocol.md lists what each field means)."""

    device: str
    t: float
    uptime_s: float | None = None
    policy: str | None = None
    tasks: tuple[str, ...] = ()
    slo_ms: float | None = None
    backlog: Mapping[str, int] = field(default_factory=dict)
    inference_share: float | None = None
    task_shares: Mapping[str, float] = field(default_factory=dict)
    microbatch: int | None = None
    max_batch: int | None = None
    latency_ms: LatencyWindow = field(default_factory=LatencyWindow)
    slo_attainment_window: float | None = None
    requests: int | None = None
    replies: int | None = None
    rejected: int | None = None
    errors: int | None = None
    train_samples: int | None = None
    train_samples_per_task: Mapping[str, int] = field(default_factory=dict)
    # Where the device's time went since it started (seconds, cumulative like the counters):
    # serving, training (also per task) and idle, out of `uptime_s` (docs/protocol.md).
    training_busy_s: float | None = None
    inference_busy_s: float | None = None
    training_busy_s_per_task: Mapping[str, float] = field(default_factory=dict)
    idle_s: float | None = None
    round: RoundProgress | None = None
    model_version: int | None = None
    decision_us_p50: float | None = None
    overhead_cpu_s: float | None = None
    compute_cpu_s: float | None = None
    process_cpu_s: float | None = None
    # The training steps' share of compute_cpu_s: what the process spends on anything else
    # serves requests (orchestration/pricing.py prices a request by it).
    training_cpu_s: float | None = None
    profile: DeviceProfile | None = None
    # A device split into lanes (docs/architecture.md): the cores each holds now, each lane's
    # compute seconds so far, and the changes of split made.
    inference_cores: int | None = None
    training_cores: int | None = None
    serving_lane_busy_s: float | None = None
    training_lane_busy_s: float | None = None
    core_switches: int | None = None
    core_reclaims: int | None = None  # splits ended early because the serving lane fell behind

    def __post_init__(self) -> None:
        check_name("device", self.device)
        if unix_s(self.t) is None:
            raise ConfigError(f"t must be unix seconds (0 to 1e10), got {short(self.t)}")
        if len(self.tasks) > MAX_TASKS:
            raise ConfigError(f"tasks has {len(self.tasks)} entries; at most {MAX_TASKS}")
        for task in self.tasks:
            check_name("task", task)
        _text("policy", self.policy)
        for name in ("microbatch", "max_batch", "requests", "replies", "rejected", "errors"):
            _count(name, getattr(self, name))
        for name in (
            "train_samples",
            "model_version",
            "inference_cores",
            "training_cores",
            "core_switches",
            "core_reclaims",
        ):
            _count(name, getattr(self, name))
        for name in ("serving_lane_busy_s", "training_lane_busy_s"):
            _seconds(name, getattr(self, name))
        for name in ("uptime_s", "slo_ms", "training_busy_s", "inference_busy_s", "idle_s"):
            _seconds(name, getattr(self, name))
        for name in ("decision_us_p50", "overhead_cpu_s", "compute_cpu_s", "process_cpu_s", "training_cpu_s"):
            _seconds(name, getattr(self, name))
        _share("inference_share", self.inference_share)
        _share("slo_attainment_window", self.slo_attainment_window)
        _per_task("backlog", self.backlog, _count)
        _per_task("task_shares", self.task_shares, _share)
        _per_task("train_samples_per_task", self.train_samples_per_task, _count)
        _per_task("training_busy_s_per_task", self.training_busy_s_per_task, _seconds)
        # Plain dicts and a tuple, whatever was passed, so snapshots compare and pickle.
        object.__setattr__(self, "tasks", tuple(self.tasks))
        for name in _PER_TASK_FIELDS:
            object.__setattr__(self, name, dict(getattr(self, name)))

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this snapshot (`v` included)."""
        return {"v": PROTOCOL_VERSION, **_to_json(self)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Telemetry:
        """The snapshot a JSON object describes; ProtocolError for a bad or missing field."""
        return _from_json(cls, obj)


@dataclass(frozen=True)
class FinalReport(Telemetry):
    """The last snapshot of a stopped agent, with what its shutdown drained and refused."""

    drained: int = 0
    rejected_at_shutdown: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _count("drained", self.drained)
        _count("rejected_at_shutdown", self.rejected_at_shutdown)

    @classmethod
    def of(cls, snapshot: Telemetry, *, drained: int, rejected_at_shutdown: int) -> FinalReport:
        values = {f.name: getattr(snapshot, f.name) for f in fields(snapshot)}
        return cls(**values, drained=drained, rejected_at_shutdown=rejected_at_shutdown)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FinalReport:
        return _from_json(cls, obj)


@dataclass(frozen=True)
class DeviceStatus:
    """The retained status: online or offline, the device's cost profile, and when it stopped,
    its final report (or the error it failed with). The offline one without `t` is its will."""

    device: str
    online: bool
    t: float | None = None
    profile: DeviceProfile | None = None
    report: FinalReport | None = None
    error: str | None = None
    payloads: tuple[str, ...] = ("json",)  # the request forms it decodes (docs/protocol.md)

    def __post_init__(self) -> None:
        check_name("device", self.device)
        if not set(self.payloads) <= set(PAYLOAD_FORMS) or "json" not in self.payloads:
            raise ConfigError(
                f"payloads must include json and lie in {list(PAYLOAD_FORMS)}, got {self.payloads}"
            )
        if self.t is not None and unix_s(self.t) is None:
            raise ConfigError(f"t must be unix seconds (0 to 1e10), got {short(self.t)}")
        _text("error", self.error)
        if self.report is not None and self.report.device != self.device:
            raise ConfigError(f"the report of {self.report.device!r} cannot be {self.device!r}'s status")


# -- codecs ------------------------------------------------------------------------------------


def _to_json(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(message):
        value = getattr(message, f.name)
        if isinstance(value, LatencyWindow | RoundProgress):
            value = _to_json(value)
        elif isinstance(value, DeviceProfile):
            value = profile_to_json(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        out[f.name] = value
    return out


def _number(value: object) -> object:
    """A JSON number as Python's int or float; an integral float reads as an int. Anything
    else is returned as it is, for the dataclass to refuse with a message naming it."""
    number = finite(value)
    if number is None:
        return value
    return int(number) if isinstance(value, float) and number.is_integer() else value


def _from_json(cls: type[T], obj: Mapping[str, Any]) -> T:
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in obj or (obj[f.name] is None and f.name not in ("device", "t")):
            continue
        value = obj[f.name]
        if f.name == "latency_ms":
            value = _nested(LatencyWindow, value, f.name)
        elif f.name == "round":
            value = _nested(RoundProgress, value, f.name)
        elif f.name == "profile":
            value = profile_from_json(value)
        elif f.name == "tasks":
            value = tuple(value) if isinstance(value, list) else value
        elif f.name in _PER_TASK_FIELDS:
            if not isinstance(value, Mapping):
                refuse("bad-field", f"field {f.name!r} must be an object, got {short(value)}")
            value = {k: _number(v) for k, v in value.items()}
        elif f.name not in ("device", "policy", "error"):
            value = _number(value)
        values[f.name] = value
    try:
        return cls(**values)
    except (ConfigError, InputError, TypeError) as exc:
        refuse("bad-field", str(exc))


def _nested(cls: type[T], value: object, name: str) -> T:
    if not isinstance(value, Mapping):
        refuse("bad-field", f"field {name!r} must be an object, got {short(value)}")
    return _from_json(cls, {k: v for k, v in value.items() if v is not None})


def encode_telemetry(snapshot: Telemetry) -> bytes:
    """One telemetry snapshot on the wire."""
    return dumps(snapshot.to_json())


def _device_object(payload: bytes, topic: str | None, topic_of: Callable[[str], str]) -> dict[str, Any]:
    fail = Failure()
    obj = parse_object(payload, MAX_DEVICE_MESSAGE_BYTES, fail)
    check_version(obj, fail)
    device = obj.get("device")
    if not isinstance(device, str):
        refuse("missing-field" if "device" not in obj else "bad-field", "field 'device' must be a string")
    try:
        check_name("device", device)
    except ConfigError as exc:
        refuse("bad-field", str(exc))
    if topic is not None and topic != topic_of(device):
        # A device publishes only about itself: a mismatch is a misconfigured or spoofing client.
        refuse("bad-field", f"device {short(device)} published on another's topic {short(topic)}")
    return obj


def decode_telemetry(payload: bytes, topic: str | None = None) -> Telemetry:
    """The snapshot; raises ProtocolError, and nothing else, for any input. With the message's
    `topic`, the snapshot's device must be the topic's device."""
    obj = _device_object(payload, topic, telemetry_topic)
    if obj.get("t") is None:
        refuse("missing-field", "telemetry field 't' is missing")
    return Telemetry.from_json(obj)


def encode_status(status: DeviceStatus) -> bytes:
    """The retained status message (the offline one without `t` is the device's last will)."""
    obj: dict[str, Any] = {"v": PROTOCOL_VERSION, "device": status.device}
    obj["state"] = "online" if status.online else "offline"
    if status.t is not None:
        obj["t"] = float(status.t)
    if status.profile is not None:
        obj["profile"] = profile_to_json(status.profile)
    if status.report is not None:
        obj["report"] = status.report.to_json()
    if status.error is not None:
        obj["error"] = status.error
    obj["payloads"] = list(status.payloads)
    return dumps(obj)


def decode_status(payload: bytes, topic: str | None = None) -> DeviceStatus:
    """The status; raises ProtocolError, and nothing else, for any input."""
    obj = _device_object(payload, topic, status_topic)
    state = obj.get("state")
    if state not in ("online", "offline"):
        refuse("bad-field", f"status field 'state' must be online or offline, got {short(state)}")
    t = obj.get("t")
    if t is not None and unix_s(t) is None:
        refuse("bad-field", f"field 't' must be unix seconds, got {short(t)}")
    try:
        profile = profile_from_json(obj["profile"]) if obj.get("profile") is not None else None
        report = FinalReport.from_json(obj["report"]) if isinstance(obj.get("report"), Mapping) else None
        error = obj.get("error")
        payloads = obj.get("payloads", ["json"])
        if not isinstance(payloads, list) or not all(isinstance(p, str) for p in payloads):
            refuse("bad-field", f"status field 'payloads' must be a list of names, got {short(payloads)}")
        known = tuple(p for p in payloads if p in PAYLOAD_FORMS) or ("json",)  # a newer form: ignored
        return DeviceStatus(obj["device"], state == "online", unix_s(t), profile, report, error, known)
    except (ConfigError, ProtocolError) as exc:
        refuse("bad-field", f"status of {short(obj['device'])}: {exc}")
