"""Policies side by side: every policy simulated on the same arrivals with the same seed, and
summarised by the one metrics code (`dartfl sim`, the benchmarks and the experiments)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import PolicyError
from dartfl.metrics import RunRecord, summarize
from dartfl.policies import make_policy
from dartfl.policies.base import Policy
from dartfl.registry import distinct
from dartfl.sim.device import SimConfig, simulate
from dartfl.store import to_jsonable
from dartfl.types import DeviceProfile, TaskSpec

__all__ = ["Comparison", "compare_policies", "task_specs"]


@dataclass(frozen=True)
class Comparison:
    """One policy (as it ended the run, so its learnt state can be read), one record and one
    JSON-ready summary per policy, in the order asked for."""

    policies: list[Policy]
    records: list[RunRecord]
    summaries: list[dict[str, Any]]
    # With keep_going: {policy, error} per policy that failed while it ran (PolicyError), left
    # out of the three lists above.
    failures: list[dict[str, str]] = field(default_factory=list)


def task_specs(arrivals: Arrivals, slo_s: float, queue_capacity: int = 1024) -> list[TaskSpec]:
    """The same SLO and queue bound for every task of `arrivals`."""
    return [TaskSpec(name, slo_s, queue_capacity) for name in arrivals.task_names]


def compare_policies(
    arrivals: Arrivals,
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec],
    specs: Sequence[str],
    config: SimConfig | None = None,
    loss_weighting: str | None = None,
    *,
    seed: int = 1,
    on_policy: Callable[[str], None] | None = None,
    keep_going: bool = False,
) -> Comparison:
    """Simulate every policy of `specs` on `arrivals`; `on_policy(name)` is told before each.
    A policy that fails while it runs (a plugin's bug) raises PolicyError, or with
    `keep_going` is named in `failures` while the others' results stand."""
    policies = [make_policy(spec, loss_weighting) for spec in distinct(specs)]  # fail fast on a bad name
    out = Comparison([], [], [])
    for policy in policies:
        if on_policy is not None:
            on_policy(policy.name)
        try:
            record = simulate(arrivals, profile, tasks, policy, config, np.random.default_rng(seed))
        except PolicyError as exc:
            if not keep_going:
                raise
            out.failures.append({"policy": policy.name, "error": str(exc)})
            continue
        out.policies.append(policy)
        out.records.append(record)
        out.summaries.append(to_jsonable(summarize(record, burst_threshold=profile.max_batch)))
    return out
