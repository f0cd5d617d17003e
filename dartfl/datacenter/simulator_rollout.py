"""The datacenter-mode simulator's state and its rollout side: admitting groups to the rollout
pool, the pool's decode throughput, and advancing the clock while booking GPU time.

`RolloutSimulator` holds every field of a run (roles, trainer, weights, buffer, measurements);
the event loop, the control periods, the trainer and the colocated path build on it in
`dartfl.datacenter.simulator`.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.datacenter.dc_run import DcRun
from dartfl.datacenter.lengths import LengthModel
from dartfl.datacenter.policies.base import DcPolicy
from dartfl.datacenter.rollout import RolloutPool
from dartfl.datacenter.types import DcConfig

__all__ = ["RolloutSimulator"]


class RolloutSimulator:
    """One run's state plus the rollout mechanics; see `dartfl.datacenter.simulator._Sim`."""

    def __init__(
        self, config: DcConfig, policy: DcPolicy, lengths: LengthModel, rng: np.random.Generator
    ) -> None:
        self.c = config
        self.m = config.model
        self.policy = policy
        self.lengths = lengths
        self.rng = rng
        self.mode = policy.mode
        self.eta = config.eta if policy.eta is None else policy.eta  # one-step fixes 1, sync 0
        self.run_ = DcRun(policy.name, policy.mode, config, self.eta)
        self.prefill_tokens = math.ceil(
            config.prompt_tokens * self.m.prefill_per_token_s / self.m.decode_fixed_s
        )
        self.pool = RolloutPool(lengths.max_tokens + self.prefill_tokens + 1)
        self.now = 0.0
        # roles
        self.rollout_gpus = 0
        self.train_gpus = 0
        self.dead: list[tuple[float, str, int]] = []  # (ready at, destination role, GPUs)
        self.pending_to_rollout = 0
        # trainer and weights
        self.version = 0  # steps finished
        self.steps_started = 0
        self.train_until = -1.0  # end of the running step (or of its weight send); <0: idle
        self.step_gpus = 0
        self.step_compute_until = -1.0
        self.weights_version = 0  # the version rollout engines hold
        self.visible: list[tuple[float, int]] = []
        self.pause_until = 0.0
        # buffer: version -> [groups, response tokens]
        self.buffer: dict[int, list[float]] = {}
        self.buffer_groups = 0
        self.accepted_groups = 0  # ever entered the buffer and not dropped
        self.admitted_groups = 0
        self.batches_admitted = 0
        self.batch_left = 0  # batch mode: groups of the current batch still to admit
        # measurements for the policy
        self._period_tokens = 0.0
        self._period_samples = 0
        self._period_rollout_groups = 0
        self._period_train_groups = 0
        self._period_blocked_s = 0.0
        self._mean_len = 0.0
        self._last_staleness = 0  # largest staleness in the last batch trained

    # ---- rollout ------------------------------------------------------------------------
    def _context_tokens(self) -> float:
        return self.c.prompt_tokens + 0.5 * (self.pool.length_biased_tokens or self.lengths.median(0.0))

    def _slots(self) -> int:
        ctx = self._context_tokens()
        return (self.rollout_gpus // self.m.tp) * self.m.engine_slots(ctx)

    def _admit(self) -> None:
        c = self.c
        if self.rollout_gpus == 0:
            return
        # dropped groups leave `accepted`, so they are generated again
        needed = c.steps * c.batch_groups - self.accepted_groups - self.pool.inflight_groups
        if self.mode == "batch":
            if self.batch_left == 0:
                j = self.batches_admitted
                if j >= c.steps or self.pool.inflight_groups or j > self.steps_started:
                    return
                if self.weights_version < j - self.eta:
                    return  # one-step: generate batch j with weights j - 1
                self.batches_admitted += 1
                self.batch_left = c.batch_groups
            capacity = self.batch_left
        else:
            capacity = (self.eta + self.weights_version + 1) * c.batch_groups - (
                self.accepted_groups + self.pool.inflight_groups
            )
            capacity = min(capacity, needed)
        free = (self._slots() - self.pool.active_samples) // c.group_size
        groups = min(capacity, free)
        if groups <= 0:
            return
        progress = self.version / max(1, c.steps - 1)
        lengths = self.lengths.draw(self.rng, groups, c.group_size, progress)
        self.pool.admit(lengths, self.weights_version, self.prefill_tokens)
        self.admitted_groups += groups
        self.run_.generated_samples += groups * c.group_size
        if self.mode == "batch":
            self.batch_left -= groups

    def _engine_tokens_per_s(self, active: int) -> float:
        """Tokens/s of the whole rollout pool with `active` sequences spread over its engines."""
        engines = self.rollout_gpus // self.m.tp
        if engines == 0 or active == 0:
            return 0.0
        per_engine = max(1.0, active / engines)
        ctx = self._context_tokens()
        slots = self.m.engine_slots(ctx)
        running = min(per_engine, float(slots))  # beyond the KV cap, sequences take turns
        step = self.m.decode_step_s(running, running * ctx)
        return engines * running / step

    def _advance(self, dt: float) -> None:
        if dt <= 0:
            return
        r, c = self.run_, self.c
        engines = self.rollout_gpus // self.m.tp
        active = self.pool.active_samples
        paused = self.now < self.pause_until - 1e-9
        # 1. book-keeping of GPU time
        switching = sum(d[2] for d in self.dead)
        if self.rollout_gpus + self.train_gpus + switching != c.gpus:
            r.booking_errors += 1
        r.rollout_gpu_s += self.rollout_gpus * dt
        r.train_gpu_s += self.train_gpus * dt
        r.switching_gpu_s += switching * dt
        idle_engines = engines if (paused or active == 0) else max(0, engines - active)
        r.rollout_idle_gpu_s += idle_engines * self.m.tp * dt
        computing = self.step_gpus if self.step_compute_until > self.now else 0
        r.train_idle_gpu_s += (self.train_gpus - computing) * dt
        if self.mode == "stream" and active < self._slots() - c.group_size:
            self._period_blocked_s += dt
        # 2. decode progress on the token clock
        if paused or engines == 0 or active == 0:
            self.now += dt
            return
        per_seq_tokens_per_s = self._engine_tokens_per_s(active) / active
        _, done = self.pool.advance(per_seq_tokens_per_s * dt)
        self.now += dt
        for version, (groups, tokens) in done.items():
            entry = self.buffer.setdefault(version, [0.0, 0.0])
            entry[0] += groups
            entry[1] += tokens
            self.buffer_groups += groups
            self.accepted_groups += groups
            self._period_tokens += tokens
            self._period_samples += groups * c.group_size
            self._period_rollout_groups += groups
