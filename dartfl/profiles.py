"""Device profiles: the built-in cost models and the TOML profile format.

A profile says what one device's work costs (docs/allocator.md, "The control model"): an inference
batch of b requests takes `batch-fixed-s + per-request-s * b`, a training microbatch of m
samples takes `microbatch-fixed-s + per-sample-s * m`. The built-in numbers are documented
estimates for DART-FL's reference model at width multiplier 6; docs/profiles.md derives each
one and cites its sources. A measured device should get its own TOML file:

    name = "edge-small"
    [inference]
    batch-fixed-s = 0.004
    per-request-s = 0.002
    max-batch = 32
    [training]
    microbatch-fixed-s = 0.010
    per-sample-s = 0.006
    max-microbatch = 32
    [inference.tasks.fashion]   # optional; missing keys inherit from [inference]
    per-request-s = 0.003
    [request-path]              # optional: what a request costs besides the model
    receive-s = 0.00006         # paho receiving and acknowledging it
    ingress-s = 0.00002         # decoding and admitting it
    egress-s = 0.00006          # encoding and publishing its reply
    per-batch-s = 0.0

Unknown keys are accepted so that the format can grow, with a warning that names the nearest
known key: `per_request_s` for `per-request-s` is a typo that would silently keep the default.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dartfl.errors import ConfigError
from dartfl.types import DeviceProfile, InferenceCost, RequestPathCost, TrainingCost

__all__ = [
    "BUILTIN_PROFILE_NAMES",
    "get_profile",
    "load_profile_toml",
    "parse_profile",
    "profile_to_toml",
    "resolve_profile",
]

log = logging.getLogger(__name__)

_NO_TASKS: Mapping[str, InferenceCost] = MappingProxyType({})


# The request path measured on the reference x86 core (docs/profiles.md, "The request path"):
# receiving a QoS 1 request, decoding and admitting it (JSON), publishing its reply alone.
_X86_PATH_S = (58e-6, 22e-6, 57e-6)


def _path(dispatch_ratio: float) -> RequestPathCost:
    """The x86 request path scaled by a device's interpreter-bound speed ratio `Kd`."""
    receive, ingress, egress = (round(t * dispatch_ratio, 6) for t in _X86_PATH_S)
    return RequestPathCost(receive_s=receive, ingress_s=ingress, egress_s=egress)


def _builtin(
    name: str,
    description: str,
    inference: tuple[float, float, int],
    training: tuple[float, float, int],
    request_path: RequestPathCost,
) -> DeviceProfile:
    batch_fixed_s, per_request_s, max_batch = inference
    microbatch_fixed_s, per_sample_s, max_microbatch = training
    return DeviceProfile(
        name=name,
        inference=InferenceCost(batch_fixed_s=batch_fixed_s, per_request_s=per_request_s),
        max_batch=max_batch,
        training=TrainingCost(
            microbatch_fixed_s=microbatch_fixed_s, per_sample_s=per_sample_s, max_microbatch=max_microbatch
        ),
        task_inference=_NO_TASKS,
        description=description,
        request_path=request_path,
    )


# Estimates, not measurements: docs/profiles.md derives every number (reference model at
# width multiplier 6, one intra-op thread on CPUs) and cites the benchmarks behind each ratio.
# Tuples: (batch-fixed-s, per-request-s, max-batch), (microbatch-fixed-s, per-sample-s,
# max-microbatch); then the request path, scaled by the dispatch ratio Kd of each device.
_BUILTIN_PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        _builtin(
            "pi4",
            "Raspberry Pi 4 (Cortex-A72, 1.8 GHz), one core; ONNX Runtime inference, PyTorch "
            "training; reference CNN at width 6. Estimate: x86 core figures scaled by public "
            "benchmark ratios (docs/profiles.md). A full training microbatch (~0.75 s) exceeds "
            "a 250 ms SLO slack: time sharing alone cannot protect latency here.",
            (0.0010, 0.0050, 32),
            (0.012, 0.023, 32),
            _path(5.5),
        ),
        _builtin(
            "pi5",
            "Raspberry Pi 5 (Cortex-A76, 2.4 GHz), one core; ONNX Runtime inference, PyTorch "
            "training; reference CNN at width 6. Estimate: about 3x a Pi 4 on compute "
            "(docs/profiles.md); a full training microbatch takes ~0.24 s.",
            (0.00048, 0.0016, 32),
            (0.0060, 0.0073, 32),
            _path(2.4),
        ),
        _builtin(
            "jetson-orin-nano",
            "NVIDIA Jetson Orin Nano 8GB GPU (1024 CUDA cores); ONNX Runtime CUDA inference, "
            "PyTorch CUDA training; reference CNN at width 6. Estimate: fixed costs dominated by "
            "the Cortex-A78AE host launching kernels, tiny per-item costs (docs/profiles.md).",
            (0.00087, 0.00016, 64),
            (0.0080, 0.00058, 64),
            _path(3.8),
        ),
        _builtin(
            "x86-1core",
            "One modern x86-64 core (AVX2/AVX-512), ONNX Runtime and PyTorch on one thread; "
            "reference CNN at width 6. Scaled from the measured width-1 ONNX Runtime figures "
            "in docs/profiles.md.",
            (0.00018, 0.00064, 32),
            (0.0022, 0.0029, 32),
            _path(1.0),
        ),
    )
}

BUILTIN_PROFILE_NAMES: tuple[str, ...] = tuple(_BUILTIN_PROFILES)


def get_profile(name: str) -> DeviceProfile:
    """The built-in profile called `name`; the error lists the valid names."""
    try:
        return _BUILTIN_PROFILES[name]
    except KeyError:
        valid = ", ".join(BUILTIN_PROFILE_NAMES)
        raise ConfigError(
            f"unknown device profile {name!r}; choose one of: {valid} (or pass a profile TOML file)"
        ) from None


def resolve_profile(name: str | None, path: str | Path | None) -> DeviceProfile:
    """A built-in profile by name, or a profile file by path: exactly one of the two."""
    if name is not None and path is None:
        return get_profile(name)
    if path is not None and name is None:
        return load_profile_toml(path)
    given = f"both {name!r} and {str(path)!r}" if name is not None else "neither"
    raise ConfigError(
        f"give exactly one of a built-in profile name ({', '.join(BUILTIN_PROFILE_NAMES)}) "
        f"or a profile TOML path; got {given}"
    )


# ---------------------------------------------------------------------------------------------
# Reading: TOML document -> DeviceProfile, every check naming the file and the dotted key.

_TOP_KEYS = frozenset({"name", "description", "inference", "training", "request-path"})
_PATH_ORDER = ("receive-s", "ingress-s", "egress-s", "per-batch-s")
_REQUEST_PATH_KEYS = frozenset({"receive-s", "ingress-s", "egress-s", "per-batch-s"})
_INFERENCE_KEYS = frozenset({"batch-fixed-s", "per-request-s", "max-batch", "tasks"})
_TRAINING_KEYS = frozenset({"microbatch-fixed-s", "per-sample-s", "max-microbatch"})
_TASK_KEYS = frozenset({"batch-fixed-s", "per-request-s"})


def load_profile_toml(path: str | Path) -> DeviceProfile:
    """Read a device profile file; any problem raises ConfigError naming the file and key."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{p}: device profile file not found; check the path") from None
    except tomllib.TOMLDecodeError as e:
        # tomllib's message carries the line and column: keep it whole.
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: the file is not UTF-8 ({e.reason})") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read device profile: {e.strerror or e}") from None
    return parse_profile(doc, source=str(p))


def parse_profile(doc: Mapping[str, Any], source: str = "<profile>") -> DeviceProfile:
    """Build a profile from an already parsed TOML document (`source` names it in errors)."""
    top = _Section(doc, "", source, _TOP_KEYS)
    name = top.string("name", required=True)
    description = top.string("description", required=False)
    inference = top.table("inference", _INFERENCE_KEYS)
    default_cost = InferenceCost(
        batch_fixed_s=inference.seconds("batch-fixed-s", allow_zero=True),
        per_request_s=inference.seconds("per-request-s", allow_zero=False),
    )
    training = top.table("training", _TRAINING_KEYS)
    task_inference: dict[str, InferenceCost] = {}
    if "tasks" in inference.values:
        tasks = inference.table("tasks", None)
        for task in tasks.values:
            if not task:
                raise ConfigError(f'{source}: inference.tasks."": a task name must not be empty')
            override = tasks.table(task, _TASK_KEYS)
            task_inference[task] = InferenceCost(
                batch_fixed_s=override.seconds(
                    "batch-fixed-s", allow_zero=True, default=default_cost.batch_fixed_s
                ),
                per_request_s=override.seconds(
                    "per-request-s", allow_zero=False, default=default_cost.per_request_s
                ),
            )
    path = RequestPathCost()
    if "request-path" in doc:  # older files price the model alone
        section = top.table("request-path", _REQUEST_PATH_KEYS)
        path = RequestPathCost(
            **{
                key.replace("-", "_"): section.seconds(key, allow_zero=True, default=0.0)
                for key in _PATH_ORDER
            }
        )
    return DeviceProfile(
        name=name,
        inference=default_cost,
        max_batch=inference.count("max-batch"),
        training=TrainingCost(
            microbatch_fixed_s=training.seconds("microbatch-fixed-s", allow_zero=True),
            per_sample_s=training.seconds("per-sample-s", allow_zero=False),
            max_microbatch=training.count("max-microbatch"),
        ),
        task_inference=MappingProxyType(task_inference) if task_inference else _NO_TASKS,
        description=description,
        request_path=path,
    )


class _Section:
    """One TOML table being read; every error names the file, the dotted key and what is expected."""

    def __init__(
        self, values: Mapping[str, Any], prefix: str, source: str, known: frozenset[str] | None
    ) -> None:
        self.values = values
        self.prefix = prefix  # "" or "training." etc.
        self.source = source
        if known is not None:  # None: the keys are names (task names), not settings
            for key in values:
                if key not in known:
                    near = difflib.get_close_matches(key, sorted(known), n=1)
                    hint = f" (did you mean {prefix}{near[0]}?)" if near else ""
                    log.warning("%s: ignoring unknown profile key %s%s%s", source, prefix, key, hint)

    def _fail(self, key: str, expected: str, example: str) -> ConfigError:
        value = self.values[key]
        return ConfigError(
            f"{self.source}: {self.prefix}{key} must be {expected} (e.g. {key} = {example}), got {value!r}"
        )

    def _require(self, key: str, expected: str) -> None:
        if key not in self.values:
            raise ConfigError(f"{self.source}: missing required key {self.prefix}{key} (expected {expected})")

    def table(self, key: str, known: frozenset[str] | None) -> _Section:
        dotted = f"{self.prefix}{_toml_key(key)}"
        if key not in self.values:
            raise ConfigError(f"{self.source}: missing required table [{dotted}]")
        value = self.values[key]
        if not isinstance(value, dict):
            raise ConfigError(f"{self.source}: {dotted} must be a table ([{dotted}]), got {value!r}")
        return _Section(value, dotted + ".", self.source, known)

    def string(self, key: str, *, required: bool) -> str:
        expected = "a non-empty string" if required else "a string"
        if key not in self.values:
            if required:
                self._require(key, expected)
            return ""
        value = self.values[key]
        if not isinstance(value, str) or (required and not value):
            raise self._fail(key, expected, '"edge-small"')
        return value

    def seconds(self, key: str, *, allow_zero: bool, default: float | None = None) -> float:
        expected = "a number of seconds " + (">= 0" if allow_zero else "> 0")
        if key not in self.values and default is not None:
            return default
        self._require(key, expected)
        value = self.values[key]
        # bool is an int subclass, but `per-sample-s = true` is a mistake, not 1 second.
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if number and (value > 0 or (allow_zero and value == 0)):
            return float(value)
        raise self._fail(key, expected, "0.005")

    def count(self, key: str) -> int:
        expected = "an integer >= 1"
        self._require(key, expected)
        value = self.values[key]
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        raise self._fail(key, expected, "32")


# ---------------------------------------------------------------------------------------------
# Writing: DeviceProfile -> TOML text in the same format (hand-written; tomllib cannot write).

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_float(value: float) -> str:
    # repr gives the shortest text that reads back to the same float, and is valid TOML.
    return repr(float(value))


def profile_to_toml(profile: DeviceProfile) -> str:
    """The profile as a TOML document that `load_profile_toml` reads back to an equal profile."""
    lines = [f"name = {_toml_string(profile.name)}"]
    if profile.description:
        lines.append(f"description = {_toml_string(profile.description)}")
    lines += [
        "",
        "[inference]",
        f"batch-fixed-s = {_toml_float(profile.inference.batch_fixed_s)}",
        f"per-request-s = {_toml_float(profile.inference.per_request_s)}",
        f"max-batch = {profile.max_batch}",
        "",
        "[training]",
        f"microbatch-fixed-s = {_toml_float(profile.training.microbatch_fixed_s)}",
        f"per-sample-s = {_toml_float(profile.training.per_sample_s)}",
        f"max-microbatch = {profile.training.max_microbatch}",
    ]
    for task in sorted(profile.task_inference):
        cost = profile.task_inference[task]
        lines += [
            "",
            f"[inference.tasks.{_toml_key(task)}]",
            f"batch-fixed-s = {_toml_float(cost.batch_fixed_s)}",
            f"per-request-s = {_toml_float(cost.per_request_s)}",
        ]
    path = profile.request_path
    if path != RequestPathCost():
        lines += ["", "[request-path]"]
        lines += [f"{key} = {_toml_float(getattr(path, key.replace('-', '_')))}" for key in _PATH_ORDER]
    return "\n".join(lines) + "\n"
