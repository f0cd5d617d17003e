"""The datacenter-mode simulator: GPUs split between rollout and training in async RL.

Discrete events (training steps, weight syncs, role switches, control periods) are handled
exactly; decode progress between them is integrated on the rollout pool's token clock in
steps of at most `tick_s`. Time is simulated; the random generator is passed in; a run is
deterministic for a seed.

The run is made of parts, each with its own state: `GpuRoles` (who holds which role),
`RolloutEngine` (engines, admission, the pool in flight), `ExperienceBuffer`, `Trainer`, and
for a lending policy `HybridLending`. `Simulation` holds them, runs the event loop and the
control periods, and books GPU time; the synchronous colocated path is
dartfl/datacenter/colocated.py. Per run it keeps the books the tests check: every GPU holds
exactly one of rollout, train or switching at all times; generated = consumed + dropped +
buffered + in flight (samples); no group past the staleness bound is trained on.
"""

from __future__ import annotations

import numpy as np

from dartfl.datacenter.buffer import ExperienceBuffer
from dartfl.datacenter.dc_run import DcRun
from dartfl.datacenter.engine import EpisodeStats, RolloutEngine, SingleTurnPool
from dartfl.datacenter.lending import HybridLending
from dartfl.datacenter.policies.base import DcPolicy, LendingPolicy
from dartfl.datacenter.roles import GpuRoles
from dartfl.datacenter.trainer import Trainer
from dartfl.datacenter.types import DcConfig, DcObservation
from dartfl.datacenter.workload import AgenticWorkload, Workload
from dartfl.errors import ConfigError, DartflError

__all__ = ["MAX_PERIODS", "MAX_SPAN_S", "DcRun", "Simulation", "simulate"]

# Limits that make every run end, and in bounded memory, whatever its inputs: time is
# simulated in steps of at most `tick_s` (1 s), so the loop's cost grows with the simulated
# span, and the series keeps one row per control period (about 0.3 KB, per policy).
# The documented scale target, 1,024 GPUs x 1,000 steps, spans 33,000 s: 3,300 periods of
# 10 s, 330,000 of the shortest, 0.1 s. 1e7 s (116 days of training) is 300 times that span
# and some 15 minutes of simulating; a million periods keep about 0.3 GB per policy. Past
# either, the inputs are mistyped (a role switch of days, a step of hours), not a study.
MAX_SPAN_S = 1e7
MAX_PERIODS = 1_000_000
# What makes a run long, for the errors of both limits.
_SHORTEN = (
    "lower --steps, --switch-cost-s, --group-size, --batch-prompts or the token lengths "
    "(--median-tokens, --max-tokens, --prompt-tokens), or add --gpus"
)


def simulate(config: DcConfig, policy: DcPolicy, workload: Workload, rng: np.random.Generator) -> DcRun:
    """Run `config.steps` training steps under `policy`; return the books."""
    from dartfl.datacenter.colocated import run_colocated

    policy.reset()
    sim = Simulation(config, policy, workload, rng)
    if policy.mode == "colocated":
        run_colocated(sim)
    else:
        sim.run_split()
    return sim.close()


class Simulation:
    """One run: its parts, the clock, the event loop and the control periods."""

    def __init__(
        self, config: DcConfig, policy: DcPolicy, workload: Workload, rng: np.random.Generator
    ) -> None:
        self.c, self.m, self.policy, self.workload = config, config.model, policy, workload
        self.mode = policy.mode
        eta = config.eta if policy.eta is None else policy.eta  # one-step fixes 1, sync 0
        self.run = DcRun(policy.name, policy.mode, config, eta)
        self.roles = GpuRoles(config.gpus)
        self.buffer = ExperienceBuffer()
        self.engine = RolloutEngine(config, self.roles, workload, rng, eta)
        self.trainer = Trainer(config, self.roles, self.engine, self.buffer, self.run)
        self.lending = (
            HybridLending(config, policy, self.roles, self.trainer, self.engine, self.run)
            if isinstance(policy, LendingPolicy)
            else None
        )
        self.now = 0.0
        self.mean_len = self.mean_extra = self.mean_wait_s = self.mean_prefill = 0.0
        # agentic: measured on finished groups, so they describe the workload, not the moment
        # (at any instant the groups still in flight are the stragglers, with long contexts)
        self.episodes = EpisodeStats(config.batch_groups) if isinstance(workload, AgenticWorkload) else None

    def close(self) -> DcRun:
        r = self.run
        r.makespan_s = self.now
        r.steps = self.trainer.version
        r.generated_samples = self.engine.admitted_groups * self.c.group_size
        r.buffered_samples = self.buffer.groups * self.c.group_size
        r.inflight_samples = self.engine.pool.inflight_samples
        r.aborted_samples = self.engine.aborted_samples
        return r

    # ---- the event loop -------------------------------------------------------------------
    def run_split(self) -> None:
        c, roles, trainer, engine = self.c, self.roles, self.trainer, self.engine
        roles.train = c.gpus  # until the first decision every GPU is the trainer's
        roles.rollout = self._clip_rollout(self.policy.decide(self._observe()).rollout_gpus)
        roles.train = c.gpus - roles.rollout
        next_period = c.period_s
        guard = 0
        while trainer.version < c.steps:
            if self.now >= next_period - 1e-9:
                self._control()
                next_period += c.period_s
            self._land_switches()
            self._trainer_events()
            engine.admit(self.buffer, self.mode, trainer.version, trainer.steps_started, self.now)
            horizon = min(next_period, self.now + c.tick_s)
            events = [trainer.train_until, engine.pause_until, *(d[0] for d in roles.dead)]
            events += [v[0] for v in engine.visible]
            if self.lending is not None:
                events.append(self.lending.next_event())
            for t in events:
                if t > self.now + 1e-9:
                    horizon = min(horizon, t)
            self.advance(horizon - self.now)
            guard = guard + 1 if self._stuck() else 0
            if guard > 10_000:
                raise self.stalled()

    def _too_long(self, what: str, fix: str = _SHORTEN) -> ConfigError:
        return ConfigError(
            f"{self.policy.name}: the run passed {what} at step {self.trainer.version:,} of "
            f"{self.c.steps:,}, more than the simulator runs; {fix}"
        )

    def stalled(self) -> DartflError:
        """The last resort when no progress is possible (dc sim checks the inputs that cause
        it, dartfl.datacenter.engine.check_fits, before any run)."""
        return DartflError(
            f"{self.policy.name}: the run stalled at t={self.now:.0f} s (no progress possible: no "
            "group fits the rollout engines; lower --group-size or the token lengths)"
        )

    def _stuck(self) -> bool:
        return (
            self.engine.pool.inflight_samples == 0
            and self.trainer.train_until < self.now
            and not self.roles.dead
            and self.trainer.sampleable() < self.c.batch_groups
        )

    def _trainer_events(self) -> None:
        self.engine.land_weights(self.now)
        trainer, lending = self.trainer, self.lending
        if trainer.tick(self.now) and lending is not None:
            lending.step_ended(self.now)
        if not trainer.idle or self.roles.pending_to_rollout:
            return
        if lending is None:
            trainer.try_start(self.now)
        elif lending.trainer_may_start(self.now):
            lending.waiting(self.now, trainer.try_start(self.now))

    def advance(self, dt: float) -> None:
        """Book GPU time for dt, decode, and move the clock."""
        if dt <= 0:
            return
        if self.now + dt > MAX_SPAN_S:
            raise self._too_long(f"{MAX_SPAN_S:,.0f} simulated seconds")
        r, roles, engine, trainer = self.run, self.roles, self.engine, self.trainer
        own, lent = engine.engines()
        engines = own + lent
        paused = self.now < engine.pause_until - 1e-9
        decoding = engine.pool.decoding
        switching = roles.switching
        if not roles.consistent():
            r.booking_errors += 1
        r.rollout_gpu_s += roles.decoding * dt
        r.train_gpu_s += roles.train * dt
        r.switching_gpu_s += switching * dt
        idle_engines = engines if (paused or decoding == 0) else max(0, engines - decoding)
        r.rollout_idle_gpu_s += idle_engines * self.m.tp * dt
        computing = trainer.step_gpus if trainer.step_compute_until > self.now else 0
        r.train_idle_gpu_s += (roles.train - computing) * dt
        if self.mode == "stream" and engine.pool.active_samples < engine.slots() - self.c.group_size:
            engine.p_blocked_s += dt
        engine.advance(dt, self.now, self.buffer)
        self.now += dt

    # ---- control ---------------------------------------------------------------------------
    def _observe(self) -> DcObservation:
        c, p, roles, engine, pool = self.c, self.c.period_s, self.roles, self.engine, self.engine.pool
        agentic = isinstance(self.workload, AgenticWorkload)
        groups = pool.inflight_groups
        tight = self.trainer.eta <= 1 and isinstance(pool, SingleTurnPool)
        quantiles, quantile_mean = (
            pool.length_quantiles() if isinstance(pool, SingleTurnPool) and tight else ((), 0.0)
        )
        return DcObservation(
            now_s=self.now,
            period_s=p,
            gpus=c.gpus,
            tp=self.m.tp,
            train_min_gpus=self.m.train_min_gpus,
            rollout_gpus=roles.rollout,
            train_gpus=roles.train,
            switching_gpus=roles.switching,
            buffer_groups=self.buffer.groups,
            inflight_groups=groups,
            batch_groups=c.batch_groups,
            group_size=c.group_size,
            eta=self.trainer.eta,
            version=self.trainer.version,
            steps_left=c.steps - self.trainer.version,
            mean_response_tokens=self.mean_len,
            prompt_tokens=c.prompt_tokens,
            measured_rollout_groups_per_s=engine.p_groups / p,
            measured_train_groups_per_s=self.trainer.period_groups / p,
            admission_blocked_share=min(1.0, engine.p_blocked_s / p),
            active_context_tokens=self._context_tokens(),
            model=self.m,
            sync_mode=c.sync_mode,
            multi_turn=agentic,
            kv_kept=not agentic or self.workload.kv == "keep",  # type: ignore[union-attr]
            mean_extra_tokens=self.mean_extra,
            mean_env_wait_s=self.mean_wait_s,
            mean_prefill_tokens=self.mean_prefill,
            running_share=self.episodes.running_share if self.episodes else 0.0,
            hybrid_gpus=roles.hybrid,
            length_quantiles=quantiles,
            quantile_mean_tokens=quantile_mean,
        )

    def _context_tokens(self) -> float:
        if self.episodes and self.episodes.context_tokens > 0:
            return self.episodes.context_tokens
        return self.engine.pool.held_context_tokens() or float(self.c.prompt_tokens)

    def _control(self) -> None:
        engine, roles, trainer = self.engine, self.roles, self.trainer
        if self.episodes is not None:
            e = self.episodes
            e.add(engine)
            self.mean_len, self.mean_extra = e.per_sample("tokens"), e.per_sample("extra")
            self.mean_wait_s, self.mean_prefill = e.per_sample("wait_s"), e.per_sample("prefill")
        elif engine.p_samples:
            self.mean_len = engine.p_tokens / engine.p_samples
        if len(self.run.series["t_s"]) >= MAX_PERIODS:
            raise self._too_long(
                f"{MAX_PERIODS:,} control periods of {self.c.period_s:g} s",
                "lengthen --period-s, or " + _SHORTEN,
            )
        obs = self._observe()
        self.policy.update(obs)
        target = self._clip_rollout(self.policy.decide(obs).rollout_gpus)
        engine.new_period()
        trainer.period_groups = 0
        self.run.record(
            t_s=self.now,
            rollout_gpus=roles.decoding,
            train_gpus=roles.train,
            switching_gpus=roles.switching,
            hybrid_gpus=roles.hybrid,
            buffer_groups=self.buffer.groups,
            inflight_groups=engine.pool.inflight_groups,
            version=trainer.version,
            staleness_max=trainer.last_staleness,
        )
        if roles.dead or roles.pending_to_rollout or roles.hybrid:
            return  # one move at a time: the last one has not landed (or the trainer is lent)
        self._move(target - roles.rollout)

    def _move(self, delta: int) -> None:
        roles, m = self.roles, self.m
        if delta < 0:  # rollout engines leave now; their sequences resume on the others
            roles.rollout += delta
            self.run.recompute_gpu_s += self.engine.abort(-delta // m.tp, self.now)
            roles.start_switch(self.now, m.switch_s, "train", -delta)
        elif delta > 0:
            room = roles.train - m.train_min_gpus
            delta = min(delta, room // m.tp * m.tp)
            if delta <= 0:
                return
            if self.trainer.train_until < self.now:
                roles.train -= delta
                roles.start_switch(self.now, m.switch_s, "rollout", delta)
            else:
                roles.pending_to_rollout = delta  # the trainer cannot shrink mid-step
        else:
            return
        self.run.switches += 1
        self.run.gpus_moved += abs(delta)

    def _clip_rollout(self, gpus: int) -> int:
        tp = self.m.tp
        most = (self.c.gpus - self.m.train_min_gpus) // tp * tp
        return max(tp, min(most, gpus // tp * tp))

    def _land_switches(self) -> None:
        roles = self.roles
        if roles.pending_to_rollout and self.trainer.train_until < self.now:
            k, roles.pending_to_rollout = roles.pending_to_rollout, 0
            roles.train -= k
            roles.start_switch(self.now, self.m.switch_s, "rollout", k)
        roles.land(self.now)
