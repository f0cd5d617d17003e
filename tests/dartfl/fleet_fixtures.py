"""What the fleet simulator's tests share: three tasks, one-core pi4 and pi5 profiles, the exact
simulator configured as the fluid model behaves, and Poisson traffic for one device."""

from __future__ import annotations

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig
from dartfl.types import DeviceProfile

# The fluid model does not refuse by deadline (docs/fleet.md): compare it with the exact
# simulator doing the same.
NO_ADMISSION = {"deadline_admission": False}
EXACT = SimConfig(**NO_ADMISSION)

NAMES = ("a", "b", "c")
# The one-core devices these equivalences were written for: the fleet model has one lane.
PI4 = get_profile("pi4").with_cores(1)
PI5 = get_profile("pi5").with_cores(1)


def poisson_device(load: float, duration_s: float, seed: int, profile: DeviceProfile = PI4) -> Arrivals:
    rate = load * profile.capacity_per_s(NAMES, (1.0, 1.0, 1.0))
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * duration_s))
    times = np.sort(rng.uniform(0.0, duration_s, n))
    return Arrivals(times, rng.integers(0, 3, n).astype(np.int64), NAMES, duration_s)
