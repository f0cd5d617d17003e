"""verl-dynamic on the Ray engine: the trainer workers roll out between training steps.

The decisions are the core policy's (dartfl.datacenter.policies.VerlDynamic: lend at a step
end if the buffer is short and the saving beats the measured switch cost; reclaim once its
adaptive threshold of groups is sampleable); this object keeps the books it needs: which
workers are lent, how long the trainer waited for data while it held its workers, and the
dead time of the last switch each way. Lending costs the worker `SWITCH_S` (wake the replica,
load the weights), reclaiming verl's measured 3.3 / 9.1 of that; the sequences a reclaimed
worker holds migrate to the dedicated rollout workers, which recompute their contexts.
"""

from __future__ import annotations

from dartfl.datacenter.lending import RECLAIM_OVER_LEND
from dartfl.datacenter.policies import VerlDynamic
from dartfl.datacenter.types import StepReport
from ray_engine.actors import SWITCH_S

__all__ = ["RayLending"]


class RayLending:
    def __init__(self, policy: VerlDynamic, steps: int, batch_groups: int) -> None:
        self.policy, self.steps, self.batch_groups = policy, steps, batch_groups
        policy.reset()
        self.lend_s = SWITCH_S
        self.reclaim_s = SWITCH_S * RECLAIM_OVER_LEND
        self.lent: set[int] = set()  # trainer workers rolling out (or on their way there)
        self.last_lend_s = self.last_reclaim_s = 0.0
        self.wait_since = -1.0
        self.step_wait_s = 0.0
        self.step_wait_groups = 0

    def step_ended(self, version: int, sampleable: int, standalone: int, trainers: int) -> bool:
        """A step ended at `version`: should the trainer workers be lent now?"""
        report = StepReport(
            version=version,
            steps_left=self.steps - version,
            batch_groups=self.batch_groups,
            minibatches=4,
            sampleable_groups=sampleable,
            wait_s=self.step_wait_s,
            wait_groups=self.step_wait_groups,
            lend_s=self.last_lend_s,
            reclaim_s=self.last_reclaim_s,
            standalone_gpus=standalone,
            trainer_gpus=trainers,
        )
        self.step_wait_s, self.step_wait_groups = 0.0, 0
        self.last_lend_s = self.last_reclaim_s = 0.0
        return self.policy.step_end(report)

    def lend(self, workers: list[int]) -> None:
        self.lent = set(workers)
        self.last_lend_s = self.lend_s

    def should_reclaim(self, sampleable: int) -> bool:
        return bool(self.lent) and sampleable >= self.policy.reclaim_groups(self.batch_groups)

    def reclaimed(self) -> list[int]:
        back, self.lent = sorted(self.lent), set()
        self.last_reclaim_s = self.reclaim_s
        return back

    def waiting(self, now: float, started: bool, sampleable: int) -> None:
        """Books the trainer's wait for data while it holds its workers (verl's sample wait)."""
        if started:
            if self.wait_since >= 0:
                self.step_wait_s += now - self.wait_since
            self.wait_since = -1.0
        elif self.wait_since < 0:
            self.wait_since = now
            self.step_wait_groups += max(0, self.batch_groups - sampleable)
