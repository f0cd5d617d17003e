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
    [cores]                     # optional; without it the device has one core
    count = 4
    inference-speedup = [1.0, 1.59, 1.98, 2.26]   # time on 1 core / time on j cores
    training-speedup = [1.0, 1.59, 1.98, 2.26]
    inference-interference = 0.15   # inference takes 1.15x as long while training runs
    training-interference = 0.10
    switch-s = 0.005                # dead time of a lane whose cores change

The costs above are one core's; `[cores]` says how the device scales and shares them
(docs/profiles.md, "Cores"). A GPU device sets `gpu = true`: its costs price the GPU, and
`cpu-batch-fixed-s` / `cpu-per-request-s` price inference on one of its CPU cores.

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

from dartfl.builtin_profiles import BUILTIN_PROFILES
from dartfl.errors import ConfigError
from dartfl.types import CoreModel, DeviceProfile, InferenceCost, RequestPathCost, TrainingCost

__all__ = [
    "BUILTIN_PROFILE_NAMES",
    "MAX_CORES",
    "MIN_INFERENCE_ITEM_S",
    "MIN_TRAINING_ITEM_S",
    "SUPERLINEAR_SPEEDUP",
    "get_profile",
    "load_profile_toml",
    "parse_profile",
    "profile_to_toml",
    "resolve_profile",
]

log = logging.getLogger(__name__)

_NO_TASKS: Mapping[str, InferenceCost] = MappingProxyType({})
_BUILTIN_PROFILES = BUILTIN_PROFILES

BUILTIN_PROFILE_NAMES: tuple[str, ...] = tuple(_BUILTIN_PROFILES)

# Bounds a profile file must keep (docs/profiles.md, "Profile files"), so that a typo or a
# made-up figure cannot stall the simulator, which takes one step per work item.
#
# Cores: more than any one device has (the largest CPUs have 192-256 cores, 512 threads); the
# agent builds a session per core count and policies search the splits, so 20,000 stalls them.
MAX_CORES = 1024
# A speedup on j cores lies in [1/j, SUPERLINEAR_SPEEDUP * j]. Above j only by what per-core
# caches holding more of the working set give, plus timing noise: `edge profile --cores 2`
# measured 2.04-2.20 on a shared 2-vCPU VM (benchmarks/results/edge_replay_split_*.json), so
# 1.05 x j would refuse real files; 1e6 on 3 cores is no device. Below 1 is contention; 1/j
# (each added core costing as much as the first gives) is far past any measured dip, and
# keeps an item's time finite.
SUPERLINEAR_SPEEDUP = 1.5
# The cheapest work item, one sample or request with its fixed cost, on the core count that
# runs it fastest. Training runs back to back, so a run of D seconds takes about D / (that
# item) simulator steps: the floor is on that sum, not on each key, which keeps a zero fixed
# cost and a GPU's tiny per-item cost. At 1 us a 20 s `dartfl sim` did not finish in 120 s;
# at 100 us it takes 5 s; a real training step takes 1 ms or more (~150 eager PyTorch ops,
# docs/profiles.md). Inference batches serve at least one request each, so the workload
# bounds their number and 1 us (ONNX Runtime's per-call overhead alone is ~14 us) only
# catches figures no device has.
MIN_TRAINING_ITEM_S = 1e-4
MIN_INFERENCE_ITEM_S = 1e-6


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

_TOP_KEYS = frozenset({"name", "description", "inference", "training", "request-path", "cores"})
_PATH_ORDER = ("receive-s", "ingress-s", "egress-s", "per-batch-s")
_REQUEST_PATH_KEYS = frozenset({"receive-s", "ingress-s", "egress-s", "per-batch-s"})
_INFERENCE_KEYS = frozenset({"batch-fixed-s", "per-request-s", "max-batch", "tasks"})
_TRAINING_KEYS = frozenset({"microbatch-fixed-s", "per-sample-s", "max-microbatch"})
_TASK_KEYS = frozenset({"batch-fixed-s", "per-request-s"})
_CORES_KEYS = frozenset(
    {
        "count",
        "inference-speedup",
        "training-speedup",
        "inference-interference",
        "training-interference",
        "switch-s",
        "gpu",
        "cpu-batch-fixed-s",
        "cpu-per-request-s",
    }
)


# The keys each table of the top level holds, for pointing a misplaced key to its table.
_TABLE_KEYS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "inference": _INFERENCE_KEYS - {"tasks"},
        "training": _TRAINING_KEYS,
        "request-path": _REQUEST_PATH_KEYS,
        "cores": _CORES_KEYS,
    }
)


def _nearest_key(
    key: str, prefix: str, known: frozenset[str], tables: Mapping[str, frozenset[str]]
) -> str | None:
    """The dotted key most like `key`: one of its own table's, or one of a sub-table's (then
    written with the table, `inference.per-request-s`); None when nothing is close."""
    candidates = {name: f"{prefix}{name}" for name in sorted(known)}
    for table, keys in tables.items():
        for name in sorted(keys):
            candidates.setdefault(name, f"{prefix}{table}.{name}")  # a key of its own wins a tie
    near = difflib.get_close_matches(key, list(candidates), n=1)
    return candidates[near[0]] if near else None


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
    top = _Section(doc, "", source, _TOP_KEYS, _TABLE_KEYS)
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
    profile = DeviceProfile(
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
        cores=_parse_cores(top.table("cores", _CORES_KEYS)) if "cores" in top.values else CoreModel(),
    )
    _check_cheapest_items(profile, source)
    return profile


def _check_cheapest_items(profile: DeviceProfile, source: str) -> None:
    """Each one-item work item, on its fastest core count, costs at least its floor
    (MIN_TRAINING_ITEM_S, MIN_INFERENCE_ITEM_S: why there)."""
    cores = profile.cores
    items = [
        (
            "a one-sample training microbatch",
            "training.microbatch-fixed-s",
            "training.per-sample-s",
            profile.training.microbatch_fixed_s + profile.training.per_sample_s,
            "training-speedup",
            cores.training_speedup,
            MIN_TRAINING_ITEM_S,
        )
    ]
    tables = {"inference": profile.inference} | {
        f"inference.tasks.{_toml_key(task)}": cost for task, cost in profile.task_inference.items()
    }
    if cores.gpu_inference_on_cpu is not None:
        tables["cores.cpu"] = cores.gpu_inference_on_cpu
    for table, cost in tables.items():
        fixed, per = (
            ("cores.cpu-batch-fixed-s", "cores.cpu-per-request-s")
            if table == "cores.cpu"
            else (f"{table}.batch-fixed-s", f"{table}.per-request-s")
        )
        total = cost.batch_fixed_s + cost.per_request_s
        what = "a one-request inference batch" + ("" if table == "inference" else f" ({table})")
        items.append(
            (what, fixed, per, total, "inference-speedup", cores.inference_speedup, MIN_INFERENCE_ITEM_S)
        )
    for what, fixed, per, total, curve_key, curve, floor in items:
        j = max(range(1, len(curve) + 1), key=lambda k: curve[k - 1])
        fastest = total / curve[j - 1]
        if fastest >= floor:
            continue
        how = f"{fixed} + {per}" if j == 1 else f"({fixed} + {per}) / cores.{curve_key} on {j} cores"
        raise ConfigError(
            f"{source}: {what} would take {fastest:.3g} s ({how}), under the floor of {floor:g} s "
            "that every real device exceeds; give the costs in seconds (e.g. per-sample-s = 0.005)"
        )


def _parse_cores(cores: _Section) -> CoreModel:
    """[cores]: how many, how items speed up on them, interference, switch time (docs/profiles.md).

    A file without the table is a one-core device, as every file was before cores were modelled."""
    count = cores.count("count", example="4", maximum=MAX_CORES)
    gpu = cores.flag("gpu")
    cpu = None
    if gpu:
        cpu = InferenceCost(
            cores.seconds("cpu-batch-fixed-s", allow_zero=True),
            cores.seconds("cpu-per-request-s", allow_zero=False),
        )
    ones = (1.0,) * count
    inference_speedup = cores.curve("inference-speedup", count, ones if count == 1 else None)
    training_speedup = cores.curve("training-speedup", count, ones if count == 1 or gpu else None)
    inference_interference = cores.seconds("inference-interference", allow_zero=True, default=0.0, unit="")
    training_interference = cores.seconds("training-interference", allow_zero=True, default=0.0, unit="")
    switch_s = cores.seconds("switch-s", allow_zero=True, default=0.0)
    # The checks above name the file and the key themselves; what CoreModel checks beyond them
    # (an infinite speedup) gets the file named here, once.
    try:
        return CoreModel(
            count=count,
            inference_speedup=inference_speedup,
            training_speedup=training_speedup,
            inference_interference=inference_interference,
            training_interference=training_interference,
            switch_s=switch_s,
            gpu_inference_on_cpu=cpu,
        )
    except ConfigError as exc:
        raise ConfigError(f"{cores.source}: [cores]: {exc}") from None


class _Section:
    """One TOML table being read; every error names the file, the dotted key and what is expected.

    `tables` (the top level's): the keys of its sub-tables, so that a key written above its
    table (`per-request-s` before any `[inference]`) is pointed to where it belongs."""

    def __init__(
        self,
        values: Mapping[str, Any],
        prefix: str,
        source: str,
        known: frozenset[str] | None,
        tables: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.values = values
        self.prefix = prefix  # "" or "training." etc.
        self.source = source
        if known is not None:  # None: the keys are names (task names), not settings
            for key in values:
                if key not in known:
                    near = _nearest_key(key, prefix, known, tables or {})
                    hint = f" (did you mean {near}?)" if near else ""
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

    def seconds(
        self, key: str, *, allow_zero: bool, default: float | None = None, unit: str = "of seconds "
    ) -> float:
        expected = f"a number {unit}" + (">= 0" if allow_zero else "> 0")
        if key not in self.values and default is not None:
            return default
        self._require(key, expected)
        value = self.values[key]
        # bool is an int subclass, but `per-sample-s = true` is a mistake, not 1 second.
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if number and (value > 0 or (allow_zero and value == 0)):
            return float(value)
        raise self._fail(key, expected, "0.005")

    def flag(self, key: str) -> bool:
        value = self.values.get(key, False)
        if isinstance(value, bool):
            return value
        raise self._fail(key, "true or false", "true")

    def curve(self, key: str, count: int, default: tuple[float, ...] | None) -> tuple[float, ...]:
        """Speedups on 1..count cores; a longer list is cut, so lowering `count` runs a measured
        file on fewer cores."""
        if key not in self.values and default is not None:
            return default
        expected = f"a list of at least {count} speedups starting at 1.0"
        self._require(key, expected)
        value = self.values[key]
        ok = isinstance(value, list) and len(value) >= count
        ok = ok and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in value
        )
        if not ok or float(value[0]) != 1.0:
            raise self._fail(key, expected, "[1.0, 1.6, 2.0, 2.3]")
        curve = tuple(float(v) for v in value[:count])
        for j, speedup in enumerate(curve[1:], start=2):  # why these bounds: SUPERLINEAR_SPEEDUP
            low, high = 1.0 / j, SUPERLINEAR_SPEEDUP * j
            if not low <= speedup <= high:
                raise ConfigError(
                    f"{self.source}: {self.prefix}{key} on {j} cores must lie in "
                    f"[1/{j}, {SUPERLINEAR_SPEEDUP:g} x {j}] = [{low:.3g}, {high:.3g}] (an item's time "
                    f"on one core over its time on {j}; e.g. {key} = [1.0, 1.6, 2.0, 2.3]), got {speedup:g}"
                )
        return curve

    def count(self, key: str, example: str = "32", maximum: int | None = None) -> int:
        expected = "an integer >= 1"
        self._require(key, expected)
        value = self.values[key]
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            if maximum is None or value <= maximum:
                return value
            raise self._fail(key, f"an integer in 1..{maximum}", example)
        raise self._fail(key, expected, example)


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
    lines += _cores_to_toml(profile.cores)
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


def _cores_to_toml(model: CoreModel) -> list[str]:
    if model.count == 1 and model == CoreModel():
        return []  # a one-core device writes the format every older reader knows
    lines = [
        "",
        "[cores]",
        f"count = {model.count}",
        f"inference-speedup = [{', '.join(_toml_float(v) for v in model.inference_speedup)}]",
        f"training-speedup = [{', '.join(_toml_float(v) for v in model.training_speedup)}]",
        f"inference-interference = {_toml_float(model.inference_interference)}",
        f"training-interference = {_toml_float(model.training_interference)}",
        f"switch-s = {_toml_float(model.switch_s)}",
    ]
    cpu = model.gpu_inference_on_cpu
    if cpu is not None:
        lines += [
            "gpu = true",
            f"cpu-batch-fixed-s = {_toml_float(cpu.batch_fixed_s)}",
            f"cpu-per-request-s = {_toml_float(cpu.per_request_s)}",
        ]
    return lines
