"""Lending the trainer's GPUs to rollout between steps (verl's hybrid replicas), in the simulator.

States of the trainer's GPUs: `train` -> `to_rollout` (dead: wake the replica, install the
new weights) -> `rollout` (hybrid engines decode beside the dedicated ones) -> `to_train`
(dead: leave the load balancer, abort in-flight requests, sleep) -> `train`.

A lend starts when the step's weight send ends, if the policy says so at the step's end; a
reclaim starts as soon as the policy's threshold of sampleable groups is reached while the
trainer is due (its previous step and weight send are over). Aborted requests resume on the
dedicated engines after their KV cache is recomputed there (verl's partial rollout), which
is counted as aborted GPU-seconds.

Dead times: into rollout, the model's role-switch time (5 s + weights loaded twice at 5 GB/s
per GPU, 9.0 s for a 5B model against verl's measured 9.1 s); back to training, that time
scaled by verl's measured 3.3 / 9.1 (release the KV cache and the weights, no load).
"""

from __future__ import annotations

from dartfl.datacenter.dc_run import DcRun
from dartfl.datacenter.engine import RolloutEngine
from dartfl.datacenter.policies.base import LendingPolicy
from dartfl.datacenter.roles import GpuRoles
from dartfl.datacenter.trainer import Trainer
from dartfl.datacenter.types import DcConfig, StepReport

__all__ = ["RECLAIM_OVER_LEND", "HybridLending", "LendingBooks"]

RECLAIM_OVER_LEND = 3.3 / 9.1  # verl-omni PR 575: switch_to_trainer 3.3 s, switch_to_rollout 9.1 s


class LendingBooks:
    """What a lending policy's step report counts since the last one: how long the trainer,
    holding its GPUs, waited for data (and how many groups short it was), and the dead time of
    the last switch each way. The simulator's lending and the Ray engine's keep the same books."""

    def __init__(self) -> None:
        self.last_lend_s = self.last_reclaim_s = 0.0  # switches since the last step report
        self.wait_since = -1.0  # the trainer holds its GPUs and waits for data since then
        self.step_wait_s = 0.0
        self.step_wait_groups = 0

    def _wait_starts(self, now: float, started: bool) -> bool:
        """Books the trainer's wait for data (verl's sample wait); True when a wait begins now,
        for the caller to add the groups it is short."""
        if started:
            if self.wait_since >= 0:
                self.step_wait_s += now - self.wait_since
            self.wait_since = -1.0
        elif self.wait_since < 0:
            self.wait_since = now
            return True
        return False

    def _step_report(
        self,
        version: int,
        steps_left: int,
        batch_groups: int,
        minibatches: int,
        sampleable_groups: int,
        standalone_gpus: int,
        trainer_gpus: int,
    ) -> StepReport:
        """The report of the step that ended, with the books; they start again."""
        report = StepReport(
            version=version,
            steps_left=steps_left,
            batch_groups=batch_groups,
            minibatches=minibatches,
            sampleable_groups=sampleable_groups,
            wait_s=self.step_wait_s,
            wait_groups=self.step_wait_groups,
            lend_s=self.last_lend_s,
            reclaim_s=self.last_reclaim_s,
            standalone_gpus=standalone_gpus,
            trainer_gpus=trainer_gpus,
        )
        self.step_wait_s, self.step_wait_groups = 0.0, 0
        self.last_lend_s = self.last_reclaim_s = 0.0
        return report


class HybridLending(LendingBooks):
    def __init__(
        self,
        config: DcConfig,
        policy: LendingPolicy,
        roles: GpuRoles,
        trainer: Trainer,
        engine: RolloutEngine,
        run: DcRun,
    ) -> None:
        super().__init__()
        self.c, self.policy, self.roles, self.trainer, self.engine, self.run = (
            config,
            policy,
            roles,
            trainer,
            engine,
            run,
        )
        self.lend_s = config.model.switch_s
        self.reclaim_s = config.model.switch_s * RECLAIM_OVER_LEND
        self.state = "train"
        self.ready_at = -1.0  # end of the dead time of the switch in flight
        self.lend_at = -1.0  # a decided lend starts then (end of the weight send); <0: none
        self.lent_gpus = 0

    def next_event(self) -> float:
        return max(self.lend_at, self.ready_at)

    def step_ended(self, now: float) -> None:
        """Called when a step's compute ends (the trainer's weight send follows)."""
        t, c = self.trainer, self.c
        left, roles = c.steps - t.version, self.roles
        report = self._step_report(
            t.version, left, c.batch_groups, c.minibatches, t.sampleable(), roles.rollout, roles.train
        )
        if self.policy.step_end(report):
            self.lend_at = t.train_until

    def trainer_may_start(self, now: float) -> bool:
        """Advance the lending state; True if the trainer holds its GPUs and may start a step."""
        roles, t = self.roles, self.trainer
        if self.state in ("to_rollout", "to_train") and now + 1e-9 >= self.ready_at:
            self.state = "rollout" if self.state == "to_rollout" else "train"
            self.ready_at = -1.0
        if self.state == "train" and self.lend_at >= 0 and now + 1e-9 >= self.lend_at:
            self.lend_at = -1.0
            self.lent_gpus = roles.train
            roles.train = 0
            roles.start_switch(now, self.lend_s, "hybrid", self.lent_gpus)
            self.state, self.ready_at = "to_rollout", now + self.lend_s
            self.last_lend_s = self.lend_s
            self._count_switch()
            return False
        if self.state == "rollout":
            # Groups past the bound can never be trained, and while they sit in the buffer they
            # hold admissions: nothing new is generated, the threshold is never reached, and a
            # lent trainer waits for ever (the trainer drops them only when it starts a step).
            t.drop_stale()
        if self.state == "rollout" and t.sampleable() >= self.policy.reclaim_groups(self.c.batch_groups):
            roles.hybrid -= self.lent_gpus
            self.run.recompute_gpu_s += self.engine.abort(self.lent_gpus // self.c.model.tp, now)
            roles.start_switch(now, self.reclaim_s, "train", self.lent_gpus)
            self.state, self.ready_at = "to_train", now + self.reclaim_s
            self.last_reclaim_s = self.reclaim_s
            self._count_switch()
            return False
        return self.state == "train" and self.lend_at < 0

    def waiting(self, now: float, started: bool) -> None:
        """Books the trainer's wait for data while it holds its GPUs (verl's sample wait)."""
        if self._wait_starts(now, started):
            self.step_wait_groups += max(0, self.c.batch_groups - self.trainer.sampleable())

    def _count_switch(self) -> None:
        self.run.switches += 1
        self.run.gpus_moved += self.lent_gpus
