"""Datacenter split policies behind one interface, built by name from the datacenter registry.

Spec grammar (dartfl.registry): `sync`, `static:<rollout-fraction>`,
`one-step[:<rollout-fraction>]`, `dart[:key=value,...]` with keys kappa, hysteresis, hold, smooth,
`verl-dynamic[:<dedicated-fraction>]` or `verl-dynamic:key=value,...` with keys f, threshold,
adaptive, step-up, step-down, release. `RAY_POLICIES` is the subset the Ray engine runs.
"""

from __future__ import annotations

from dartfl.datacenter.policies.base import MODES, DcPolicy, LendingPolicy, split_gpus
from dartfl.datacenter.policies.dart import DcDartConfig, DcDartPolicy
from dartfl.datacenter.policies.one_step import OneStep
from dartfl.datacenter.policies.static import StaticSplit
from dartfl.datacenter.policies.sync import Colocated
from dartfl.datacenter.policies.verl_dynamic import VerlDynamic, VerlDynamicConfig
from dartfl.datacenter.rates import predicted_rates
from dartfl.registry import Entry, Knob, Registry, fraction, non_negative, positive_int

__all__ = [
    "DC_POLICIES",
    "DC_POLICY_FORMS",
    "MODES",
    "RAY_POLICIES",
    "Colocated",
    "DcDartConfig",
    "DcDartPolicy",
    "DcPolicy",
    "LendingPolicy",
    "OneStep",
    "StaticSplit",
    "VerlDynamic",
    "VerlDynamicConfig",
    "make_dc_policy",
    "predicted_rates",
    "split_gpus",
]

_FRACTION = Knob("f", float, "fraction of the GPUs that rolls out", fraction, field="fraction")


def _dart(**knobs: float) -> DcDartPolicy:
    return DcDartPolicy(DcDartConfig(**knobs))  # type: ignore[arg-type]


def _verl(**knobs: float) -> VerlDynamic:
    return VerlDynamic(VerlDynamicConfig(**knobs))  # type: ignore[arg-type]


# DART's knobs but smooth: the Ray engine's controller judges measured rates and smooths no
# score, so its entry (RAY_POLICIES) takes these alone.
_DART_KNOBS = (
    Knob("kappa", float, "weight of the buffer's drift against throughput"),
    Knob("hysteresis", float, "least relative gain of the smoothed score worth a move"),
    Knob("hold", float, "periods a move must repay its dead time in", field="hold_periods"),
)
_SMOOTH = Knob("smooth", float, "EWMA weight of a period's scores, in (0, 1]", field="score_smoothing")
_DART_SUMMARY = "drift-plus-penalty, GPUs move at run time"


def _ratio(value: float) -> str | None:
    return None if 0.0 < value <= 1.0 else "must lie in (0, 1]"


def _flag(value: int) -> str | None:
    return None if value in (0, 1) else "must be 0 or 1"


DC_POLICIES: Registry[DcPolicy] = Registry.of(
    "datacenter policy",
    [
        Entry("sync", "sync", "colocated: all GPUs roll out, then all train", Colocated),
        Entry(
            "static",
            "static:F",
            "fixed split, a fraction F in (0, 1) of the GPUs rolls out",
            StaticSplit,
            (_FRACTION,),
            positional=1,
            required=1,
            needs="needs its rollout fraction in (0, 1), e.g. static:0.5",
        ),
        Entry(
            "one-step",
            "one-step[:F]",
            "one-step off-policy on a static split (default F = 0.5)",
            OneStep,
            (_FRACTION,),
            positional=1,
        ),
        Entry(
            "dart",
            "dart[:kappa=K,hysteresis=H,hold=P,smooth=W]",
            _DART_SUMMARY,
            _dart,
            (*_DART_KNOBS, _SMOOTH),
        ),
        Entry(
            "verl-dynamic",
            "verl-dynamic[:F]",
            "verl's hybrid replicas: dedicated share F (0.5), trainer GPUs lent between steps",
            _verl,
            (
                Knob(
                    "f", float, "share of the GPUs in the dedicated rollout pool", fraction, field="fraction"
                ),
                Knob("threshold", float, "initial share of a batch sampleable before a reclaim", _ratio),
                Knob("adaptive", int, "1: adapt the threshold to the trainer's waits", _flag),
                Knob("step-up", float, "threshold rise after sustained waits", non_negative),
                Knob("step-down", float, "threshold fall after sustained calm", non_negative),
                Knob("release", int, "consecutive steps before the threshold moves", positive_int),
            ),
            positional=1,
        ),
    ],
)
DC_POLICY_FORMS = tuple(DC_POLICIES.help_lines())
# The policies the Ray engine runs (ray_engine/): the simulator's spec forms and knobs, but
# DART's without smooth, so that its list of valid policies offers no knob it would refuse.
RAY_POLICIES: Registry[DcPolicy] = Registry.of(
    "Ray engine policy",
    [
        DC_POLICIES.entries["sync"],
        DC_POLICIES.entries["static"],
        Entry("dart", "dart[:kappa=K,hysteresis=H,hold=P]", _DART_SUMMARY, _dart, _DART_KNOBS),
        DC_POLICIES.entries["verl-dynamic"],
    ],
)


def make_dc_policy(spec: str) -> DcPolicy:
    """Build a datacenter policy from its spec; the error lists the valid forms."""
    return DC_POLICIES.build(spec)
