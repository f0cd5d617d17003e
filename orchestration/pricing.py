"""Before a replay sized by `--target-load`: let the agent price its requests under traffic.

An agent that has served nothing yet prices a request by its calibration, which times each
part of the request path alone (docs/profiles.md, "The request path"). Under traffic the parts
contend for the interpreter and the cores, and a request costs more: on the 2-core x86 VM a
width-1 agent calibrated at 0.32 ms a request and spent 0.62 ms (issue 13), so a replay sized
to half its capacity from the calibration sent more than it could serve and lost thousands.
The agent measures what its requests really cost while it serves (edge_client/path_meter.py,
ProfiledCosts) and publishes it in every telemetry snapshot. So a replay sized from the agent
first sends a short Poisson warm-up at a light load by the calibration's price, and sizes the
workload from the price the agent publishes after it. The warm-up's requests are not part of
the replay's figures; the agent's lifetime counters include them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from dartfl.types import DeviceProfile
from orchestration.replay import ReplayOptions, replay
from workloads import generate, rate_for_load

log = logging.getLogger(__name__)

__all__ = ["WARM_UP_LOAD", "WARM_UP_S", "price_under_traffic"]

WARM_UP_S = 3.0  # long enough for telemetry snapshots (1 s apart) after the price settles
WARM_UP_LOAD = 0.25  # by the calibration's price: below capacity even if it is 3x too cheap
MIN_REQUESTS = 20  # a model that slow is priced by its batches, not its request path
# However cheap the agent says it is: a price 100x too low must not make the warm-up a flood.
MAX_RATE = 1000.0


def price_under_traffic(
    options: ReplayOptions,
    images: Mapping[str, tuple[np.ndarray, np.ndarray]],
    profile: DeviceProfile,
    tasks: Sequence[str],
    policy: str,
    seed: int = 0,
) -> DeviceProfile:
    """The price the agent publishes after serving a warm-up (the given one if it publishes none)."""
    names, mix = tuple(tasks), (1.0,) * len(tasks)
    rate = min(MAX_RATE, rate_for_load(profile, names, mix, WARM_UP_LOAD))
    duration = max(WARM_UP_S, MIN_REQUESTS / rate)
    rng = np.random.default_rng(seed)
    warm_up = generate("poisson", duration_s=duration, rate_per_s=rate, task_names=names, rng=rng)
    log.warning(
        "pricing %s's requests under traffic: %d requests at %.0f/s first",
        options.device,
        warm_up.num_requests,
        rate,
    )
    quiet = replace(options, settle_s=2.0, grace_s=0.5, lag_warning_s=float("inf"))
    outcome = replay(warm_up, quiet, images, profile, policy)
    learnt = outcome.last_telemetry.profile if outcome.last_telemetry is not None else None
    if learnt is None:
        return profile
    before, after = profile.capacity_per_s(names, mix), learnt.capacity_per_s(names, mix)
    log.warning("%s serves about %.0f requests/s under traffic (it said %.0f)", options.device, after, before)
    return learnt
