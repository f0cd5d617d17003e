"""The fleet ports of the baselines: `inference-only`, `inference-first[:m]` and `static:<x>`.

Each decides the same for every device: a fixed inference share and microbatch, the device's
own batch cap and uniform task shares, as the scalar policies do."""

from __future__ import annotations

import numpy as np

from dartfl.errors import ConfigError
from dartfl.sim.fleet_policy_api import FleetAllocation, FleetObservation, FleetPolicy
from dartfl.sim.fleet_types import IntArray

__all__ = ["FleetInferenceFirst", "FleetInferenceOnly", "FleetStatic"]


def _uniform(obs: FleetObservation, share: float, microbatch: IntArray) -> FleetAllocation:
    d, k = obs.backlog.shape
    return FleetAllocation(np.full(d, share), microbatch, obs.max_batch.copy(), np.full((d, k), 1.0 / k))


class FleetInferenceOnly(FleetPolicy):
    def __init__(self) -> None:
        self.name = "inference-only"

    def decide(self, obs: FleetObservation) -> FleetAllocation:
        return _uniform(obs, 1.0, np.zeros(obs.num_devices, dtype=np.int64))


class FleetInferenceFirst(FleetPolicy):
    def __init__(self, microbatch: int | None = None) -> None:
        self.microbatch = microbatch
        self.name = "inference-first" if microbatch is None else f"inference-first:{microbatch}"

    def decide(self, obs: FleetObservation) -> FleetAllocation:
        m = obs.max_microbatch if self.microbatch is None else np.minimum(obs.max_microbatch, self.microbatch)
        return _uniform(obs, 1.0, m.astype(np.int64, copy=True))


class FleetStatic(FleetPolicy):
    def __init__(self, inference_share: float) -> None:
        if not 0.0 <= inference_share <= 1.0:
            raise ConfigError(f"static inference share must lie in [0, 1], got {inference_share}")
        self.inference_share = inference_share
        self.name = f"static:{inference_share:g}"

    def decide(self, obs: FleetObservation) -> FleetAllocation:
        return _uniform(obs, self.inference_share, obs.max_microbatch.astype(np.int64, copy=True))
