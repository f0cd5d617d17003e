"""The datacenter-mode simulator: GPUs split between rollout and training in async RL.

Discrete events (training steps, weight syncs, role switches, control periods) are handled
exactly; decode progress between them is integrated on the rollout pool's token clock in
steps of at most `tick_s` (dartfl/datacenter/rollout.py). Time is simulated; the random
generator is passed in; a run is deterministic for a seed.

Per run it keeps the books the tests check: every GPU holds exactly one of rollout, train or
switching at all times; generated = consumed + dropped + buffered + in flight (samples); no
group past the staleness bound is trained on.

The run's books are `DcRun` (dartfl/datacenter/dc_run.py); the state and the rollout side
(admission, decode throughput, the clock) are in dartfl/datacenter/simulator_rollout.py.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.datacenter.dc_run import DcRun
from dartfl.datacenter.lengths import LengthModel
from dartfl.datacenter.policies.base import DcPolicy
from dartfl.datacenter.simulator_rollout import RolloutSimulator
from dartfl.datacenter.types import DcConfig, DcObservation
from dartfl.errors import DartflError

__all__ = ["DcRun", "simulate"]


def simulate(config: DcConfig, policy: DcPolicy, lengths: LengthModel, rng: np.random.Generator) -> DcRun:
    """Run `config.steps` training steps under `policy`; return the books."""
    policy.reset()
    return _Sim(config, policy, lengths, rng).run()


class _Sim(RolloutSimulator):
    """One run: the event loop, control periods, the trainer and the colocated path."""

    # ---- the main loop ------------------------------------------------------------------
    def run(self) -> DcRun:
        if self.mode == "colocated":
            self._run_colocated()
        else:
            self._run_split()
        r = self.run_
        r.makespan_s = self.now
        r.steps = self.version
        r.buffered_samples = self.buffer_groups * self.c.group_size
        r.inflight_samples = self.pool.active_samples
        return r

    def _run_split(self) -> None:
        c = self.c
        first = self.policy.decide(self._observe())
        self.rollout_gpus = self._clip_rollout(first.rollout_gpus)
        self.train_gpus = c.gpus - self.rollout_gpus
        next_period = c.period_s
        guard = 0
        while self.version < c.steps:
            if self.now >= next_period - 1e-9:
                self._control()
                next_period += c.period_s
            self._land_switches()
            self._trainer_events()
            self._admit()
            horizon = min(next_period, self.now + c.tick_s)
            for t in (
                self.train_until,
                self.pause_until,
                *(d[0] for d in self.dead),
                *(v[0] for v in self.visible),
            ):
                if t > self.now + 1e-9:
                    horizon = min(horizon, t)
            self._advance(horizon - self.now)
            guard = guard + 1 if self._stuck() else 0
            if guard > 10_000:
                raise DartflError(
                    f"{self.policy.name}: the run stalled at t={self.now:.0f} s (no progress possible)"
                )

    def _stuck(self) -> bool:
        return (
            self.pool.active_samples == 0
            and self.train_until < self.now
            and not self.dead
            and (self.buffer_groups < self.c.batch_groups)
        )

    # ---- control ------------------------------------------------------------------------
    def _observe(self) -> DcObservation:
        c, p = self.c, self.c.period_s
        switching = sum(d[2] for d in self.dead)
        return DcObservation(
            now_s=self.now,
            period_s=p,
            gpus=c.gpus,
            tp=self.m.tp,
            train_min_gpus=self.m.train_min_gpus,
            rollout_gpus=self.rollout_gpus,
            train_gpus=c.gpus - self.rollout_gpus - switching,
            switching_gpus=switching,
            buffer_groups=self.buffer_groups,
            inflight_groups=self.pool.inflight_groups,
            batch_groups=c.batch_groups,
            group_size=c.group_size,
            eta=self.eta,
            version=self.version,
            steps_left=c.steps - self.version,
            mean_response_tokens=self._mean_len,
            prompt_tokens=c.prompt_tokens,
            measured_rollout_groups_per_s=self._period_rollout_groups / p,
            measured_train_groups_per_s=self._period_train_groups / p,
            admission_blocked_share=min(1.0, self._period_blocked_s / p),
            active_context_tokens=self._context_tokens(),
            model=self.m,
            sync_mode=c.sync_mode,
        )

    def _control(self) -> None:
        if self._period_samples:
            self._mean_len = self._period_tokens / self._period_samples
        obs = self._observe()
        self.policy.update(obs)
        target = self._clip_rollout(self.policy.decide(obs).rollout_gpus)
        self._period_tokens = 0.0
        self._period_samples = 0
        self._period_rollout_groups = self._period_train_groups = 0
        self._period_blocked_s = 0.0
        s = self.run_.series
        for key, value in (
            ("t_s", self.now),
            ("rollout_gpus", self.rollout_gpus),
            ("train_gpus", obs.train_gpus),
            ("switching_gpus", obs.switching_gpus),
            ("buffer_groups", self.buffer_groups),
            ("inflight_groups", self.pool.inflight_groups),
            ("version", self.version),
            ("staleness_max", self._last_staleness),
        ):
            s[key].append(float(value))
        if self.dead or self.pending_to_rollout:
            return  # one move at a time: the last one has not landed
        delta = target - self.rollout_gpus
        if delta < 0:  # rollout engines leave now; their sequences resume on the others
            self.rollout_gpus += delta
            self.dead.append((self.now + self.m.switch_s, "train", -delta))
        elif delta > 0:
            room = self.train_gpus - self.m.train_min_gpus
            delta = min(delta, room // self.m.tp * self.m.tp)
            if delta <= 0:
                return
            if self.train_until < self.now:
                self.train_gpus -= delta
                self.dead.append((self.now + self.m.switch_s, "rollout", delta))
            else:
                self.pending_to_rollout = delta  # the trainer cannot shrink mid-step
        else:
            return
        self.run_.switches += 1
        self.run_.gpus_moved += abs(delta)

    def _clip_rollout(self, gpus: int) -> int:
        tp = self.m.tp
        most = (self.c.gpus - self.m.train_min_gpus) // tp * tp
        return max(tp, min(most, gpus // tp * tp))

    def _land_switches(self) -> None:
        if self.pending_to_rollout and self.train_until < self.now:
            k = self.pending_to_rollout
            self.pending_to_rollout = 0
            self.train_gpus -= k
            self.dead.append((self.now + self.m.switch_s, "rollout", k))
        if not self.dead:
            return
        keep = []
        for ready, role, k in self.dead:
            if ready <= self.now + 1e-9:
                if role == "rollout":
                    self.rollout_gpus += k
                else:
                    self.train_gpus += k
            else:
                keep.append((ready, role, k))
        self.dead = keep

    # ---- trainer ------------------------------------------------------------------------
    def _trainer_events(self) -> None:
        while self.visible and self.visible[0][0] <= self.now + 1e-9:
            self.weights_version = max(self.weights_version, self.visible.pop(0)[1])
            if self.c.sync_mode == "interrupt":
                # AReaL-style interruptible generation: in-flight samples finish under the new
                # weights, so their behaviour version is the new one (decoupled PPO corrects the
                # older prefix); blocking/overlapped keep the version generation started with.
                self.pool.retag(self.weights_version)
        if self.train_until >= 0 and self.now + 1e-9 >= self.train_until:
            self.train_until = -1.0
        if self.step_compute_until >= 0 and self.now + 1e-9 >= self.step_compute_until:
            self._finish_step()
        if self.train_until < 0 and self.step_compute_until < 0 and not self.pending_to_rollout:
            self._start_step()

    def _start_step(self) -> None:
        c = self.c
        self._drop_stale()
        if self.buffer_groups < c.batch_groups or self.train_gpus < self.m.train_min_gpus:
            return
        need = c.batch_groups
        tokens = 0.0
        self._last_staleness = 0
        for v in sorted(self.buffer):
            groups, toks = self.buffer[v]
            take = min(need, int(groups))
            share = toks * take / groups
            tokens += share
            stale = self.version - v
            self.run_.staleness_counts[stale] = self.run_.staleness_counts.get(stale, 0) + take
            self._last_staleness = max(self._last_staleness, stale)
            if take == groups:
                del self.buffer[v]
            else:
                self.buffer[v] = [groups - take, toks - share]
            need -= take
            if need == 0:
                break
        self.buffer_groups -= c.batch_groups
        samples = c.batch_samples
        self.run_.trained_samples += samples
        self.run_.trained_tokens += tokens
        self._period_train_groups += c.batch_groups
        self.step_gpus = self.train_gpus
        self.step_compute_until = self.now + self._train_time_s(samples, tokens, self.step_gpus)
        self.train_until = self.step_compute_until
        self.steps_started += 1

    def _train_time_s(self, samples: int, response_tokens: float, gpus: int) -> float:
        m, c = self.m, self.c
        tokens = response_tokens + samples * c.prompt_tokens
        per_rank = math.ceil(samples / gpus)
        padding = per_rank * gpus / samples  # a batch that does not divide leaves ranks idle
        efficiency = 1.0 / (1.0 + 0.02 * math.log2(max(1, gpus)))
        return (
            tokens * m.train_per_token_gpu_s * padding / (gpus * efficiency)
            + c.minibatches * m.minibatch_overhead_s
        )

    def _finish_step(self) -> None:
        self.step_compute_until = -1.0
        self.version += 1
        m, mode = self.m, self.c.sync_mode
        if mode == "overlapped":
            self.train_until = self.now + m.sync_low_s
            self.visible.append((self.now + m.sync_s, self.version))
        else:
            pause = m.sync_s
            if mode == "interrupt" and self.rollout_gpus:
                # in-flight sequences recompute their KV cache under the new weights
                engines = self.rollout_gpus // m.tp
                ctx = self.c.prompt_tokens + 0.5 * self.pool.length_biased_tokens
                pause += self.pool.active_samples * ctx * m.prefill_per_token_s / engines
            self.pause_until = max(self.pause_until, self.now + pause)
            self.train_until = self.now + m.sync_s
            self.visible.append((self.now + pause, self.version))

    def _drop_stale(self) -> None:
        """Groups whose version is more than eta behind the next step can never be trained."""
        floor = self.version - self.eta
        for v in [v for v in self.buffer if v < floor]:
            groups, toks = self.buffer.pop(v)
            g = int(groups)
            self.buffer_groups -= g
            self.accepted_groups -= g
            self.run_.dropped_samples += g * self.c.group_size
            rate = self._engine_tokens_per_s(self.c.batch_samples) / self.m.tp
            self.run_.wasted_gpu_s += toks / max(1e-9, rate)

    # ---- colocated (synchronous) --------------------------------------------------------
    def _run_colocated(self) -> None:
        c, m = self.c, self.m
        for step in range(c.steps):
            # 1. every GPU rolls out one batch; the phase ends with the batch's longest group
            self.rollout_gpus, self.train_gpus = c.gpus, 0
            start = self.now
            left = c.batch_groups
            progress = step / max(1, c.steps - 1)
            while left or self.pool.inflight_groups:
                free = (self._slots() - self.pool.active_samples) // c.group_size
                take = min(left, free)
                if take > 0:
                    self.pool.admit(
                        self.lengths.draw(self.rng, take, c.group_size, progress), step, self.prefill_tokens
                    )
                    self.run_.generated_samples += take * c.group_size
                    left -= take
                self._advance(c.tick_s)
            self.run_.rollout_phase_s += self.now - start
            # 2. switch to training: offload the engines, load the optimizer (dead time)
            self._colocated_dead(c.colocated_switch_s)
            batch = self.buffer.pop(step)
            self.buffer_groups = 0
            self.run_.staleness_counts[0] = self.run_.staleness_counts.get(0, 0) + int(batch[0])
            self.run_.trained_samples += c.batch_samples
            self.run_.trained_tokens += batch[1]
            self.train_gpus, self.rollout_gpus = c.gpus, 0
            self.step_gpus = c.gpus
            duration = self._train_time_s(c.batch_samples, batch[1], c.gpus)
            self.step_compute_until = self.now + duration
            self._advance(duration)
            self.step_compute_until = -1.0
            self.version += 1
            # 3. reshard the new weights into the engines and switch back
            self._colocated_dead(m.sync_low_s + c.colocated_switch_s)
        self.rollout_gpus, self.train_gpus = c.gpus, 0

    def _colocated_dead(self, seconds: float) -> None:
        self.rollout_gpus, self.train_gpus = 0, 0
        self.dead = [(self.now + seconds, "rollout", self.c.gpus)]
        self._advance(seconds)
        self.dead = []
