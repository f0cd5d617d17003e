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

from dartfl.datacenter.lending import RECLAIM_OVER_LEND, LendingBooks
from dartfl.datacenter.policies import VerlDynamic
from ray_engine.actors import SWITCH_S

__all__ = ["RayLending"]


class RayLending(LendingBooks):
    def __init__(self, policy: VerlDynamic, steps: int, batch_groups: int) -> None:
        super().__init__()
        self.policy, self.steps, self.batch_groups = policy, steps, batch_groups
        policy.reset()
        self.lend_s = SWITCH_S
        self.reclaim_s = SWITCH_S * RECLAIM_OVER_LEND
        self.lent: set[int] = set()  # trainer workers rolling out (or on their way there)

    def step_ended(self, version: int, sampleable: int, standalone: int, trainers: int) -> bool:
        """A step ended at `version`: should the trainer workers be lent now?"""
        report = self._step_report(
            version, self.steps - version, self.batch_groups, 4, sampleable, standalone, trainers
        )
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
        if self._wait_starts(now, started):
            self.step_wait_groups += max(0, self.batch_groups - sampleable)
