"""The training side of a simulated run: steps on the oldest groups within the staleness
bound, their duration on the trainer's GPUs, and the weight update each step sends."""

from __future__ import annotations

import math

from dartfl.datacenter.buffer import ExperienceBuffer
from dartfl.datacenter.dc_run import DcRun
from dartfl.datacenter.engine import RolloutEngine
from dartfl.datacenter.roles import GpuRoles
from dartfl.datacenter.types import DcConfig

__all__ = ["Trainer", "train_time_s"]


def train_time_s(
    config: DcConfig, samples: int, response_tokens: float, extra_tokens: float, gpus: int
) -> float:
    """One step's compute: 8N FLOPs per token at the model's MFU, data parallel with a 2% loss
    per doubling, ranks padded when the batch does not divide, plus per-minibatch overhead.
    `extra_tokens` (tool outputs of agentic episodes) are trained through like the prompt."""
    m, c = config.model, config
    tokens = response_tokens + extra_tokens + samples * c.prompt_tokens
    per_rank = math.ceil(samples / gpus)
    padding = per_rank * gpus / samples  # a batch that does not divide leaves ranks idle
    efficiency = 1.0 / (1.0 + 0.02 * math.log2(max(1, gpus)))
    return (
        tokens * m.train_per_token_gpu_s * padding / (gpus * efficiency)
        + c.minibatches * m.minibatch_overhead_s
    )


class Trainer:
    """Policy versions, the step in progress and the weight sync that follows it."""

    def __init__(
        self, config: DcConfig, roles: GpuRoles, engine: RolloutEngine, buffer: ExperienceBuffer, run: DcRun
    ) -> None:
        self.c, self.m, self.roles, self.engine, self.buffer, self.run = (
            config,
            config.model,
            roles,
            engine,
            buffer,
            run,
        )
        self.eta = run.eta
        self.version = 0  # steps finished
        self.steps_started = 0
        self.train_until = -1.0  # end of the running step (or of its weight send); <0: idle
        self.step_compute_until = -1.0
        self.step_gpus = 0
        self.last_staleness = 0  # largest staleness in the last batch trained
        self.period_groups = 0

    @property
    def idle(self) -> bool:
        """No step computing and no weight send in progress."""
        return self.train_until < 0 and self.step_compute_until < 0

    @property
    def computing(self) -> bool:
        return self.step_compute_until >= 0

    def tick(self, now: float) -> bool:
        """End what is due at `now`; True if a step finished (its weights are on their way)."""
        if self.train_until >= 0 and now + 1e-9 >= self.train_until:
            self.train_until = -1.0
        if self.step_compute_until >= 0 and now + 1e-9 >= self.step_compute_until:
            self._finish_step(now)
            return True
        return False

    def sampleable(self) -> int:
        """Groups the next step may train on (not past the staleness bound)."""
        return self.buffer.sampleable(self.version - self.eta)

    def try_start(self, now: float) -> bool:
        """Start a step if a batch within the bound is ready and the trainer has its minimum."""
        c = self.c
        self.drop_stale()
        if self.buffer.groups < c.batch_groups or self.roles.train < self.m.train_min_gpus:
            return False
        batch = self.buffer.take(c.batch_groups, self.version)
        self.last_staleness = 0
        for stale, groups in batch.staleness.items():
            self.run.staleness_counts[stale] = self.run.staleness_counts.get(stale, 0) + groups
            self.last_staleness = max(self.last_staleness, stale)
        samples = c.batch_samples
        self.run.trained_samples += samples
        self.run.trained_tokens += batch.response_tokens
        self.period_groups += c.batch_groups
        self.step_gpus = self.roles.train
        duration = train_time_s(c, samples, batch.response_tokens, batch.extra_tokens, self.step_gpus)
        self.step_compute_until = now + duration
        self.train_until = self.step_compute_until
        self.steps_started += 1
        return True

    def _finish_step(self, now: float) -> None:
        self.step_compute_until = -1.0
        self.version += 1
        m, mode, engine = self.m, self.c.sync_mode, self.engine
        if mode == "overlapped":
            self.train_until = now + m.sync_low_s
            engine.visible.append((now + m.sync_s, self.version))
            return
        pause = m.sync_s
        if mode == "interrupt" and self.roles.decoding:
            pause += engine.interrupt_pause_s()  # in-flight KV recomputed under the new weights
        engine.pause_until = max(engine.pause_until, now + pause)
        self.train_until = now + m.sync_s
        engine.visible.append((now + pause, self.version))

    def drop_stale(self) -> None:
        """Groups whose version is more than eta behind the next step can never be trained."""
        dropped = self.buffer.drop_below(self.version - self.eta)
        for groups, tokens in dropped:
            self.run.dropped_samples += groups * self.c.group_size
            rate = self.engine.tokens_per_s(self.c.batch_samples) / self.m.tp
            self.run.wasted_gpu_s += tokens / max(1e-9, rate)
