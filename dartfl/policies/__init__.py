"""Co-scheduling policies behind one interface, built by name from the edge registry.

Spec grammar (dartfl.registry): `name`, `name:VALUE,...` or `name:key=value,...`, e.g.
`dart`, `dart:4` (knob V = 4), `dart:budget=0.01`, `static:0.5`, `inference-first:8`,
`threshold:2,16`, `cores:2` (a static split of a multi-core device's cores), or the name of a
policy another installed package provides (dartfl/policies/plugins.py). A policy brings
its natural loss weighting (`dart`: demand, the baselines: uniform); `loss_weighting`
overrides it.
"""

from __future__ import annotations

from dartfl.errors import ConfigError
from dartfl.policies.base import FutureAwarePolicy, Policy
from dartfl.policies.clairvoyant import Clairvoyant
from dartfl.policies.cores import StaticCores
from dartfl.policies.dart import DART_KNOBS, DartConfig, DartPolicy
from dartfl.policies.inference_first import InferenceFirst
from dartfl.policies.inference_only import InferenceOnly
from dartfl.policies.plugins import EDGE_PLUGINS
from dartfl.policies.proportional import Proportional
from dartfl.policies.shares import LOSS_WEIGHTINGS
from dartfl.policies.static import StaticShare
from dartfl.policies.threshold import Threshold
from dartfl.registry import Entry, Knob, Registry, non_negative_int, positive_int, unit_interval

__all__ = [
    "EDGE_POLICIES",
    "POLICY_NAMES",
    "Clairvoyant",
    "DartConfig",
    "DartPolicy",
    "FutureAwarePolicy",
    "Policy",
    "make_policy",
    "natural_loss_weighting",
]


def _dart(loss_weighting: str, **knobs: object) -> DartPolicy:
    return DartPolicy(DartConfig(loss_weighting=loss_weighting, **knobs))  # type: ignore[arg-type]


EDGE_POLICIES: Registry[Policy] = Registry.of(
    "policy",
    [
        Entry(
            "dart",
            "dart[:V | :key=value,...]",
            f"queue-aware allocator; keys {', '.join(k.key for k in DART_KNOBS)} (docs/allocator.md)",
            _dart,
            DART_KNOBS,
            positional=1,
        ),
        Entry("inference-only", "inference-only", "never trains (latency reference)", InferenceOnly),
        Entry(
            "inference-first",
            "inference-first[:m]",
            "strict inference priority, fixed microbatch m",
            InferenceFirst,
            (Knob("m", int, "training microbatch, samples", positive_int, field="microbatch"),),
            positional=1,
        ),
        Entry(
            "static",
            "static:<x>",
            "fixed inference share x in [0, 1]",
            StaticShare,
            (Knob("x", float, "inference share", unit_interval, field="inference_share"),),
            positional=1,
            required=1,
            needs="needs its inference share in [0, 1], e.g. static:0.7",
        ),
        Entry(
            "threshold",
            "threshold[:low,high]",
            "backlog thresholds with hysteresis",
            Threshold,
            (Knob("low", int, "backlog that stops training"), Knob("high", int, "backlog that resumes it")),
            positional=2,
        ),
        Entry("proportional", "proportional", "inference share proportional to estimated load", Proportional),
        Entry(
            "cores",
            "cores:<k>[,m]",
            "static core split: inference on k cores, training on the rest; the serving lane "
            "trains steps of m in its idle time (default 0: it only serves)",
            StaticCores,
            (
                Knob("k", int, "cores serving inference", positive_int, field="inference_cores"),
                Knob(
                    "m",
                    int,
                    "serving lane's training microbatch, samples",
                    non_negative_int,
                    field="microbatch",
                ),
            ),
            positional=2,
            required=1,
            needs="needs its inference cores, e.g. cores:2",
        ),
        Entry("clairvoyant", "clairvoyant", "knows future arrivals (simulator only reference)", Clairvoyant),
    ],
)
# Names no built-in claims are looked up among installed packages' policies (docs/plugins.md).
EDGE_POLICIES.plugins = EDGE_PLUGINS
POLICY_NAMES = EDGE_POLICIES.names


def natural_loss_weighting(spec: str) -> str:
    return "demand" if spec.split(":", 1)[0].strip() == "dart" else "uniform"


def make_policy(spec: str, loss_weighting: str | None = None) -> Policy:
    """Build a policy from its spec; errors list the valid names and forms."""
    weighting = loss_weighting or natural_loss_weighting(spec)
    if weighting not in LOSS_WEIGHTINGS:
        raise ConfigError(f"unknown loss weighting {weighting!r}; valid: {', '.join(LOSS_WEIGHTINGS)}")
    policy = EDGE_POLICIES.build(spec, loss_weighting=weighting)
    if loss_weighting is not None and weighting != natural_loss_weighting(spec):
        policy.name = f"{policy.name}+{weighting}"
    return policy
