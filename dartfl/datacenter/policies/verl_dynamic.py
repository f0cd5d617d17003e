"""`verl-dynamic`: verl's dynamic resource scheduling, hybrid replicas on the trainer's GPUs.

What verl does (docs/datacenter.md, "verl-dynamic", cites the code and what is guessed):
a dedicated rollout pool is fixed at launch (`F` of the GPUs); the trainer's GPUs hold a
sleeping rollout replica ("hybrid"). When a step ends and the buffer holds fewer sampleable
groups than a threshold for the next step, the trainer lends all its GPUs to generation
(wake up, install the new weights), if the time this saves beats the measured cost of a
switch there and back. When the next step is due, the trainer waits until the threshold is
sampleable, then reclaims its GPUs: hybrid replicas leave the load balancer, their in-flight
requests are aborted and retried on the dedicated pool, their memory goes back to training.

The threshold adapts to how starved the trainer is (verl v0.9.1, separate_async):
`switch_threshold_ratio` starts at 0.4 of the batch; after 2 consecutive steps in which the
trainer waited for data longer than the buffer's 2 s poll it rises by 0.05 (reclaim later:
more rollout), after 2 calm steps it falls by 0.03, within [1/minibatches, 1]; the threshold
is floored at one minibatch. The lend decision's benefit is the groups still missing times
the measured seconds per awaited group times (1 - standalone / all GPUs), the share of that
wait the lent GPUs would remove; the cost is the mean of the last 3 measured switches each
way. With no measurement yet, it lends.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from dartfl.datacenter.policies.base import LendingPolicy, split_gpus
from dartfl.datacenter.types import DcAllocation, DcObservation, StepReport
from dartfl.errors import ConfigError

__all__ = ["VerlDynamic", "VerlDynamicConfig"]


@dataclass(frozen=True)
class VerlDynamicConfig:
    """verl's knobs (trainer.v1.separate_async.hybrid_rollout), defaults as verl ships them."""

    fraction: float = 0.5  # dedicated rollout share: verl's fully-async recipes split 50/50
    threshold: float = 0.4  # switch_threshold_ratio: reclaim once this share of a batch is sampleable
    adaptive: int = 1  # adaptive_switch_threshold
    step_up: float = 0.05  # switch_threshold_step_up
    step_down: float = 0.03  # switch_threshold_step_down
    release: int = 2  # switch_threshold_release_steps
    window: int = 3  # switch_cost_window_size
    poll_s: float = 2.0  # the replay buffer's poll interval: a longer wait counts as idle

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction < 1.0:
            raise ConfigError(
                f"verl-dynamic f (dedicated rollout share) must lie in (0, 1), got {self.fraction}"
            )
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"verl-dynamic threshold must lie in (0, 1], got {self.threshold}")
        for name in ("step_up", "step_down", "poll_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"verl-dynamic {name} must be a finite number >= 0, got {value}")
        if self.adaptive not in (0, 1) or self.release < 1 or self.window < 1:
            raise ConfigError(
                f"verl-dynamic adaptive must be 0 or 1, release and window >= 1; got {self.adaptive}, "
                f"{self.release}, {self.window}"
            )


class VerlDynamic(LendingPolicy):
    mode = "stream"

    def __init__(self, config: VerlDynamicConfig | None = None) -> None:
        self.config = config or VerlDynamicConfig()
        self.name = "verl-dynamic"
        self.reset()

    def reset(self) -> None:
        cfg = self.config
        self.ratio = cfg.threshold
        self.idle_steps = self.calm_steps = 0
        self.wait_s = 0.0  # summed over steps that waited, for the seconds per awaited group
        self.wait_groups = 0
        self.lend_costs: deque[float] = deque(maxlen=cfg.window)
        self.reclaim_costs: deque[float] = deque(maxlen=cfg.window)
        self.minibatches = 4
        self.lends = 0

    def decide(self, obs: DcObservation) -> DcAllocation:
        return DcAllocation(split_gpus(self.config.fraction, obs.gpus, obs.tp, obs.train_min_gpus))

    def reclaim_groups(self, batch_groups: int) -> int:
        """verl's `_switch_threshold`: ratio x batch, at least one minibatch, at most a batch."""
        minibatch = batch_groups // self.minibatches
        return min(max(round(self.ratio * batch_groups), minibatch), batch_groups)

    def _adapt(self, had_idle: bool) -> None:
        cfg = self.config
        if had_idle:
            self.calm_steps = 0
            self.idle_steps = min(self.idle_steps + 1, cfg.release)
            if self.idle_steps >= cfg.release:
                # once per step (verl issue #7665: the released code added it twice)
                self.ratio = min(1.0, self.ratio + cfg.step_up)
            return
        self.idle_steps = 0
        self.calm_steps = min(self.calm_steps + 1, cfg.release)
        if self.calm_steps >= cfg.release:
            self.ratio = max(1.0 / self.minibatches, self.ratio - cfg.step_down)

    def step_end(self, report: StepReport) -> bool:
        cfg = self.config
        self.minibatches = report.minibatches
        if report.lend_s > 0:
            self.lend_costs.append(report.lend_s)
        if report.reclaim_s > 0:
            self.reclaim_costs.append(report.reclaim_s)
        had_idle = report.wait_s > cfg.poll_s
        if report.wait_groups > 0 and report.wait_s > 0:
            self.wait_s += report.wait_s
            self.wait_groups += report.wait_groups
        if cfg.adaptive:
            self._adapt(had_idle)
        remaining = max(0, self.reclaim_groups(report.batch_groups) - report.sampleable_groups)
        if report.steps_left <= 0 or remaining == 0:
            return False
        if not self.wait_groups or not self.lend_costs or not self.reclaim_costs:
            return True  # nothing measured yet: verl lends
        per_group_s = self.wait_s / self.wait_groups
        all_gpus = report.standalone_gpus + report.trainer_gpus
        benefit = remaining * per_group_s * (1.0 - report.standalone_gpus / all_gpus)
        cost = sum(self.lend_costs) / len(self.lend_costs) + sum(self.reclaim_costs) / len(self.reclaim_costs)
        return benefit > cost
