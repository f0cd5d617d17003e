"""Datacenter split policies behind one interface, built by name from the datacenter registry.

Spec grammar (dartfl.registry): `sync`, `static:<rollout-fraction>`,
`one-step[:<rollout-fraction>]`, `dart[:key=value,...]` with keys kappa, hysteresis, hold.
"""

from __future__ import annotations

from dartfl.datacenter.policies.base import MODES, DcPolicy, split_gpus
from dartfl.datacenter.policies.dart import DcDartConfig, DcDartPolicy, predicted_rates
from dartfl.datacenter.policies.one_step import OneStep
from dartfl.datacenter.policies.static import StaticSplit
from dartfl.datacenter.policies.sync import Colocated
from dartfl.registry import Entry, Knob, Registry, fraction

__all__ = [
    "DC_POLICIES",
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

_FRACTION = Knob("f", float, "fraction of the GPUs that rolls out", fraction, field="fraction")


def _dart(**knobs: float) -> DcDartPolicy:
    return DcDartPolicy(DcDartConfig(**knobs))  # type: ignore[arg-type]


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
            "dart[:kappa=K,hysteresis=H,hold=P]",
            "drift-plus-penalty, GPUs move at run time",
            _dart,
            (
                Knob("kappa", float, "weight of the buffer's drift against throughput"),
                Knob("hysteresis", float, "least relative throughput gain worth a move"),
                Knob("hold", float, "periods a move must repay its dead time in", field="hold_periods"),
            ),
        ),
    ],
)
DC_POLICY_FORMS = tuple(DC_POLICIES.help_lines())


def make_dc_policy(spec: str) -> DcPolicy:
    """Build a datacenter policy from its spec; the error lists the valid forms."""
    return DC_POLICIES.build(spec)
