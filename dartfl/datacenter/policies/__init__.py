"""Datacenter split policies behind one interface, built by name through `make_dc_policy`.

Spec grammar: `sync`, `static:<rollout-fraction>`, `one-step[:<rollout-fraction>]`,
`dart[:key=value,...]` with keys kappa, hysteresis, hold.
"""

from __future__ import annotations

from typing import Any

from dartfl.datacenter.policies.base import MODES, DcPolicy, split_gpus
from dartfl.datacenter.policies.dart import DcDartConfig, DcDartPolicy, predicted_rates
from dartfl.datacenter.policies.one_step import OneStep
from dartfl.datacenter.policies.static import StaticSplit
from dartfl.datacenter.policies.sync import Colocated
from dartfl.errors import ConfigError

__all__ = [
    "DC_POLICY_FORMS",
    "MODES",
    "Colocated",
    "DcDartConfig",
    "DcDartPolicy",
    "DcPolicy",
    "OneStep",
    "StaticSplit",
    "make_dc_policy",
    "predicted_rates",
    "split_gpus",
]

DC_POLICY_FORMS = (
    "sync                      colocated: all GPUs roll out, then all train",
    "static:F                  fixed split, a fraction F in (0, 1) of the GPUs rolls out",
    "one-step[:F]              one-step off-policy on a static split (default F = 0.5)",
    "dart[:kappa=K,hysteresis=H,hold=P]  drift-plus-penalty, GPUs move at run time",
)
_DART_KEYS = {"kappa": "kappa", "hysteresis": "hysteresis", "hold": "hold_periods"}


def _fraction(spec: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(
            f"policy {spec!r}: {text!r} is not a number; expected a fraction in (0, 1)"
        ) from None


def make_dc_policy(spec: str) -> DcPolicy:
    """Build a datacenter policy from its spec; the error lists the valid forms."""
    name, _, arg = spec.strip().partition(":")
    policy: DcPolicy
    if name == "sync" and not arg:
        policy = Colocated()
    elif name == "static" and arg:
        policy = StaticSplit(_fraction(spec, arg))
    elif name == "one-step":
        policy = OneStep(_fraction(spec, arg)) if arg else OneStep()
    elif name == "dart":
        values: dict[str, Any] = {}
        for item in filter(None, arg.split(",")):
            key, _, text = item.partition("=")
            if key.strip() not in _DART_KEYS:
                raise ConfigError(f"policy {spec!r}: unknown key {key!r}; valid: {', '.join(_DART_KEYS)}")
            values[_DART_KEYS[key.strip()]] = _fraction(spec, text)
        policy = DcDartPolicy(DcDartConfig(**values))
    else:
        forms = "\n  ".join(DC_POLICY_FORMS)
        raise ConfigError(f"unknown datacenter policy {spec!r}; valid policies:\n  {forms}")
    policy.name = spec.strip()
    return policy
