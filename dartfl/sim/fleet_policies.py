"""Policies for the fleet simulator, by name: the registry of the scalar policies' fleet ports.

A fleet policy decides for every device at once (the interface: `dartfl.sim.fleet_policy_api`;
the ports: `dartfl.sim.fleet_dart`, `dartfl.sim.fleet_baselines`). The ports repeat the scalar
policies' arithmetic operation for operation (same order, same float64 rounding), so for the
same observation they give the same microbatch, inference share, batch cap and task shares as
`dartfl.policies` (a test checks it on random observations).

Ports exist for `dart`, `inference-only`, `inference-first[:m]` and `static:<x>`. Their specs
are the scalar policies' (the same registry entries, built by the fleet ports' factories).
"""

from __future__ import annotations

from dartfl.errors import ConfigError
from dartfl.policies import EDGE_POLICIES, DartConfig
from dartfl.policies.plugins import plugin_installed
from dartfl.registry import Registry
from dartfl.sim.fleet_baselines import FleetInferenceFirst, FleetInferenceOnly, FleetStatic
from dartfl.sim.fleet_dart import FleetDart
from dartfl.sim.fleet_policy_api import FleetAllocation, FleetObservation, FleetPolicy

__all__ = [
    "FLEET_POLICIES",
    "FLEET_POLICY_NAMES",
    "FleetAllocation",
    "FleetDart",
    "FleetInferenceFirst",
    "FleetInferenceOnly",
    "FleetObservation",
    "FleetPolicy",
    "FleetStatic",
    "make_fleet_policy",
]


def _fleet_dart(**knobs: object) -> FleetDart:
    return FleetDart(DartConfig(**knobs))  # type: ignore[arg-type]


FLEET_POLICIES: Registry[FleetPolicy] = Registry.of(
    "fleet policy",
    [
        EDGE_POLICIES.entries["dart"].ported(_fleet_dart),
        EDGE_POLICIES.entries["inference-only"].ported(FleetInferenceOnly),
        EDGE_POLICIES.entries["inference-first"].ported(FleetInferenceFirst),
        EDGE_POLICIES.entries["static"].ported(FleetStatic),
    ],
)
FLEET_POLICY_NAMES = FLEET_POLICIES.names


def make_fleet_policy(spec: str) -> FleetPolicy:
    """A fleet policy from its spec (the scalar grammar); errors list the ported names."""
    name = spec.strip().partition(":")[0].strip()
    if name not in EDGE_POLICIES.names and plugin_installed(name):
        raise ConfigError(
            f"policy {spec.strip()!r} is a plugin (docs/plugins.md): plugins run in `dartfl sim` and on "
            "devices; the fleet simulator runs its own policies, vectorised over devices: "
            + ", ".join(e.form for e in FLEET_POLICIES.entries.values())
        )
    if name in EDGE_POLICIES.names and name not in FLEET_POLICY_NAMES:
        raise ConfigError(
            f"policy {spec.strip()!r} has no fleet port; the fleet simulator runs: "
            + ", ".join(e.form for e in FLEET_POLICIES.entries.values())
        )
    return FLEET_POLICIES.build(spec)
