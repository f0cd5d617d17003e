"""Co-scheduling policies behind one interface, built by name through `make_policy`.

Spec grammar: `name[:argument]`, e.g. `dart`, `dart:4` (knob V = 4), `static:0.5`,
`inference-first:8`, `threshold:2,16`. A policy brings its natural loss weighting (`dart`:
demand, the baselines: uniform); `loss_weighting` overrides it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dartfl.errors import ConfigError
from dartfl.policies.base import Policy
from dartfl.policies.clairvoyant import Clairvoyant
from dartfl.policies.dart import DartConfig, DartPolicy
from dartfl.policies.inference_first import InferenceFirst
from dartfl.policies.inference_only import InferenceOnly
from dartfl.policies.proportional import Proportional
from dartfl.policies.shares import LOSS_WEIGHTINGS
from dartfl.policies.static import StaticShare
from dartfl.policies.threshold import Threshold

__all__ = [
    "POLICY_NAMES",
    "Clairvoyant",
    "DartConfig",
    "DartPolicy",
    "Policy",
    "make_policy",
    "natural_loss_weighting",
]

SPEC_HELP = {
    "dart": "dart[:V | :v=V,margin=G,budget=D,debt=C,memory=S,shares=demand|uniform] - queue-aware allocator",
    "inference-only": "inference-only - never trains (latency reference)",
    "inference-first": "inference-first[:m] - strict inference priority, fixed microbatch m",
    "static": "static:<x> - fixed inference share x in [0, 1]",
    "threshold": "threshold[:low,high] - backlog thresholds with hysteresis",
    "proportional": "proportional - inference share proportional to estimated load",
    "clairvoyant": "clairvoyant - knows future arrivals (simulator only reference)",
}
POLICY_NAMES = tuple(SPEC_HELP)


def natural_loss_weighting(spec: str) -> str:
    return "demand" if spec.split(":", 1)[0].strip() == "dart" else "uniform"


def _number(spec: str, text: str, kind: Callable[[str], Any]) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"policy {spec!r}: {text!r} is not a valid {kind.__name__}") from None


# spec key -> (DartConfig field, how the text is read)
DART_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "v": ("v", float),
    "margin": ("slack_margin", float),
    "budget": ("miss_budget", float),
    "debt": ("debt", float),
    "memory": ("burst_memory_s", float),
    "shares": ("task_shares", str.strip),  # DartConfig checks it is one of TASK_SHARES
}


def _dart_config(spec: str, arg: str, weighting: str) -> DartConfig:
    """`dart`, `dart:V` or `dart:key=value,...` with keys v, margin, budget, debt, memory (numbers)
    and shares (`demand` or `uniform`)."""
    values: dict[str, Any] = {}
    if arg and "=" not in arg:
        values["v"] = float(_number(spec, arg, float))
    elif arg:
        for item in arg.split(","):
            key, _, text = item.partition("=")
            key = key.strip()
            if key not in DART_KEYS:
                raise ConfigError(f"policy {spec!r}: unknown key {key!r}; valid: {', '.join(DART_KEYS)}")
            field, read = DART_KEYS[key]
            values[field] = _number(spec, text, read)
    try:
        return DartConfig(loss_weighting=weighting, **values)
    except ConfigError as exc:
        raise ConfigError(f"policy {spec!r}: {exc}") from None


def make_policy(spec: str, loss_weighting: str | None = None) -> Policy:
    """Build a policy from its spec; errors list the valid names and forms."""
    name, _, arg = spec.strip().partition(":")
    weighting = loss_weighting or natural_loss_weighting(spec)
    if weighting not in LOSS_WEIGHTINGS:
        raise ConfigError(f"unknown loss weighting {weighting!r}; valid: {', '.join(LOSS_WEIGHTINGS)}")
    policy: Policy
    if name == "dart":
        policy = DartPolicy(_dart_config(spec, arg, weighting))
    elif name == "inference-only" and not arg:
        policy = InferenceOnly(weighting)
    elif name == "inference-first":
        m = int(_number(spec, arg, int)) if arg else None
        if m is not None and m < 1:
            raise ConfigError(f"policy {spec!r}: the microbatch must be >= 1")
        policy = InferenceFirst(m, weighting)
    elif name == "static":
        if not arg:
            raise ConfigError(f"policy {spec!r} needs its inference share in [0, 1], e.g. static:0.7")
        x = float(_number(spec, arg, float))
        if not 0.0 <= x <= 1.0:
            raise ConfigError(f"policy {spec!r}: the inference share must lie in [0, 1]")
        policy = StaticShare(x, weighting)
    elif name == "threshold":
        low, high = (2, 16)
        if arg:
            parts = arg.split(",")
            if len(parts) != 2:
                raise ConfigError(f"policy {spec!r}: expected threshold:LOW,HIGH")
            low, high = (int(_number(spec, p, int)) for p in parts)
        policy = Threshold(low, high, weighting)
    elif name == "proportional" and not arg:
        policy = Proportional(weighting)
    elif name == "clairvoyant" and not arg:
        policy = Clairvoyant(weighting)
    else:
        forms = "\n  ".join(SPEC_HELP.values())
        raise ConfigError(f"unknown policy {spec!r}; valid policies:\n  {forms}")
    # Results are keyed by the spec exactly as the user wrote it, so scripts can look them up.
    policy.name = spec.strip()
    if loss_weighting is not None and weighting != natural_loss_weighting(spec):
        policy.name = f"{policy.name}+{weighting}"
    return policy
