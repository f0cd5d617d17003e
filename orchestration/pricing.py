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

Even those metered terms leave work out: they time the network thread's handlers and the
executor's batches, not the threads handing work over, the interpreter lock between them, the
broker acknowledgements, telemetry and the garbage collector. At width 1 they priced a request
at ~0.42 ms while the agent's process spent 0.47-0.76 ms of CPU on each (issue 13), so "load
0.5" was 0.6-0.9 of what it serves and the bursts of a Pareto on/off trace piled up past the
replayer's patience: 70,801 of 146,200 requests lost. The process CPU clock misses nothing, so
the warm-up also reads it from the snapshots (less what training steps spent, which serves no
request) and a request is priced by the larger of the two: the metered terms when the other
threads are cheap, the process's CPU per request when they are not. The difference goes to
the sizing profile's `receive-s`, the term that already stands for whatever else the agent
does for the traffic; the agent's own profile is left as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dartfl.protocol import Telemetry
from dartfl.types import DeviceProfile
from orchestration.replay import ReplayOptions, replay
from workloads import generate, rate_for_load

log = logging.getLogger(__name__)

__all__ = [
    "WARM_UP_LOAD",
    "WARM_UP_S",
    "TrafficPrice",
    "price_at_least",
    "price_under_traffic",
    "serving_cpu_per_request_s",
]

WARM_UP_S = 3.0  # long enough for telemetry snapshots (1 s apart) after the price settles
WARM_UP_LOAD = 0.25  # by the calibration's price: below capacity even if it is 3x too cheap
MIN_REQUESTS = 20  # a model that slow is priced by its batches, not its request path
# However cheap the agent says it is: a price 100x too low must not make the warm-up a flood.
MAX_RATE = 1000.0


def serving_cpu_per_request_s(snapshots: Sequence[Telemetry]) -> float | None:
    """The agent's process CPU seconds per request received between its first and last
    snapshot, less its training steps' CPU. None when it cannot be told: fewer than
    MIN_REQUESTS requests, a restart in between, a counter missing, or an agent too old to
    report `training_cpu_s` that trained in the window."""
    if len(snapshots) < 2:
        return None
    first, last = snapshots[0], snapshots[-1]
    if (last.uptime_s or 0.0) < (first.uptime_s or 0.0):
        return None  # restarted: its counters began again
    if None in (first.requests, last.requests, first.process_cpu_s, last.process_cpu_s):
        return None
    requests = int(last.requests or 0) - int(first.requests or 0)
    cpu_s = float(last.process_cpu_s or 0.0) - float(first.process_cpu_s or 0.0)
    if requests < MIN_REQUESTS or cpu_s < 0.0:
        return None
    if first.training_cpu_s is not None and last.training_cpu_s is not None:
        training_s = last.training_cpu_s - first.training_cpu_s
    elif (last.training_busy_s or 0.0) - (first.training_busy_s or 0.0) > 0.0:
        return None  # it trained, and does not say what that cost its CPU
    else:
        training_s = 0.0
    return max(0.0, cpu_s - training_s) / requests


def price_at_least(
    profile: DeviceProfile, tasks: Sequence[str], mix: Sequence[float], per_request_s: float
) -> DeviceProfile:
    """`profile`, its requests priced at `per_request_s` on average for the task mix where it
    prices them cheaper: the difference goes to every task's request path (`receive_s`), so
    `capacity_per_s` comes out 1 / `per_request_s`."""
    names, weights = tuple(tasks), tuple(mix)
    priced_s = 1.0 / profile.capacity_per_s(names, weights)
    if not per_request_s > priced_s:
        return profile
    path = profile.request_path
    return replace(profile, request_path=replace(path, receive_s=path.receive_s + per_request_s - priced_s))


@dataclass(frozen=True)
class TrafficPrice:
    """What a warm-up learnt: the profile the agent published after it, and its process CPU
    per request (None when it could not be told)."""

    metered: DeviceProfile
    cpu_per_request_s: float | None

    def priced(self, tasks: Sequence[str]) -> DeviceProfile:
        """The metered profile, raised to the process CPU per request where that is dearer."""
        if self.cpu_per_request_s is None:
            return self.metered
        return price_at_least(self.metered, tasks, (1.0,) * len(tasks), self.cpu_per_request_s)


def price_under_traffic(
    options: ReplayOptions,
    images: Mapping[str, tuple[np.ndarray, np.ndarray]],
    profile: DeviceProfile,
    tasks: Sequence[str],
    policy: str,
    seed: int = 0,
) -> TrafficPrice:
    """Serve the warm-up on the agent priced by `profile`, and read what it cost (the given
    profile stands when the agent publishes none); `.priced(tasks)` is what a replay is sized by."""
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
        return TrafficPrice(profile, None)
    cpu_s = serving_cpu_per_request_s(outcome.telemetry)
    metered_s = 1.0 / learnt.capacity_per_s(names, mix)
    log.warning(
        "%s serves about %.0f requests/s under traffic (it said %.0f; a request: %.0f us metered, "
        "%s of process CPU)",
        options.device,
        1.0 / max(metered_s, cpu_s or 0.0),
        profile.capacity_per_s(names, mix),
        metered_s * 1e6,
        "unknown" if cpu_s is None else f"{cpu_s * 1e6:.0f} us",
    )
    return TrafficPrice(learnt, cpu_s)
