"""The synchronous colocated executor (`sync`): every GPU rolls out one batch, waiting for its
longest group, then offloads the engines (a context switch), every GPU trains on the batch,
the new weights are resharded into the engines, and they switch back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dartfl.datacenter.trainer import train_time_s

if TYPE_CHECKING:
    from dartfl.datacenter.simulator import Simulation

__all__ = ["run_colocated"]


def run_colocated(sim: Simulation) -> None:
    c, m, roles, engine, trainer, run = sim.c, sim.m, sim.roles, sim.engine, sim.trainer, sim.run
    for step in range(c.steps):
        # 1. Every GPU rolls out one batch; the phase ends with the batch's longest group.
        roles.rollout, roles.train = c.gpus, 0
        start = sim.now
        left = c.batch_groups
        progress = step / max(1, c.steps - 1)
        while left or engine.pool.inflight_groups:
            if engine.pool.waiting:
                engine.pool.resume_waiting(engine.slots() - engine.pool.active_samples, sim.now)  # type: ignore[union-attr]
            free = (engine.slots() - engine.pool.active_samples) // c.group_size
            take = min(left, free)
            if take > 0:
                engine.start_groups(take, step, progress, sim.now)
                left -= take
            elif not engine.pool.inflight_groups and not engine.pool.waiting:
                raise sim.stalled()  # nothing runs and nothing can start: it would tick forever
            sim.advance(c.tick_s)
        run.rollout_phase_s += sim.now - start
        # 2. Switch to training: offload the engines, load the optimizer (dead time).
        _dead(sim, c.colocated_switch_s)
        groups, tokens, extra = sim.buffer.by_version.pop(step)
        sim.buffer.groups = 0
        run.staleness_counts[0] = run.staleness_counts.get(0, 0) + int(groups)
        run.trained_samples += c.batch_samples
        run.trained_tokens += tokens
        roles.train, roles.rollout = c.gpus, 0
        trainer.step_gpus = c.gpus
        duration = train_time_s(c, c.batch_samples, tokens, extra, c.gpus)
        trainer.step_compute_until = sim.now + duration
        sim.advance(duration)
        trainer.step_compute_until = -1.0
        trainer.version += 1
        # 3. Reshard the new weights into the engines and switch back.
        _dead(sim, m.sync_low_s + c.colocated_switch_s)
    roles.rollout, roles.train = c.gpus, 0


def _dead(sim: Simulation, seconds: float) -> None:
    roles = sim.roles
    roles.rollout, roles.train = 0, 0
    roles.dead = [(sim.now + seconds, "rollout", sim.c.gpus)]
    sim.advance(seconds)
    roles.dead = []
