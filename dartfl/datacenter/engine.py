"""The rollout side of a simulated run: the engines' decode throughput, admission under the
staleness bound, weight updates landing, and the pool of sequences in flight.

The pool is single-turn (`RolloutPool`, binned on the token clock) or agentic (`AgenticPool`,
episodes that pause for tools); `SingleTurnPool` gives the first the second's interface.
Engines are the dedicated rollout GPUs plus, under verl-dynamic, the trainer GPUs lent to
rollout (hybrid replicas, with the smaller KV cache verl leaves them); sequences spread over
both in proportion to their slots.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.datacenter.agentic_pool import AgenticPool, Finished
from dartfl.datacenter.buffer import ExperienceBuffer
from dartfl.datacenter.lengths import LengthModel
from dartfl.datacenter.roles import GpuRoles
from dartfl.datacenter.rollout import RolloutPool
from dartfl.datacenter.types import QUANTILE_LEVELS, DcConfig
from dartfl.datacenter.workload import AgenticWorkload, Workload
from dartfl.errors import ConfigError

__all__ = ["EpisodeStats", "RolloutEngine", "SingleTurnPool", "check_fits"]


def check_fits(config: DcConfig, workload: Workload) -> None:
    """Refuse, before any run, token lengths and groups the rollout engines cannot hold.

    1. A sequence (prompt plus the longest response) must fit the KV cache of one engine, the
       most memory any sequence can have (agentic episodes are cut at their context window,
       so only their prompt is checked). A longer one is no model of a real engine, and the
       pool's ring (rollout.py) would be sized by it: a 10^11-token cap asked numpy for 93 GiB.
    2. A group's samples are admitted together, so one group must fit in the slots of every
       GPU rolling out at the context `RolloutEngine.slots` starts from (the prompt plus half
       the median response; agentic: the prompt and half again). If it does not, nothing is
       ever admitted and the run stalls under every policy; a group that fits there is not
       refused, even if it must wait for room later in a run (the stall guard's case).
    """
    m, prompt = config.model, config.prompt_tokens
    engine_kv = f"the {m.kv_tokens_per_engine:,}-token KV cache of one {m.name} rollout engine"
    if prompt > m.kv_tokens_per_engine:
        raise ConfigError(
            f"--prompt-tokens {prompt:,} does not fit {engine_kv}; lower --prompt-tokens "
            "(or pick a --model-size with more KV cache per engine)"
        )
    if isinstance(workload, AgenticWorkload):
        context = 1.5 * prompt
    else:
        longest = prompt + workload.max_tokens
        if longest > m.kv_tokens_per_engine:
            raise ConfigError(
                f"--max-tokens {workload.max_tokens:,}: a sequence of up to {longest:,} tokens "
                f"(with --prompt-tokens {prompt:,}) does not fit {engine_kv}; lower --max-tokens or "
                "--prompt-tokens (or pick a --model-size with more KV cache per engine)"
            )
        context = prompt + 0.5 * workload.median(0.0)
    engines = config.gpus // m.tp
    slots = engines * m.engine_slots(context)
    if config.group_size > slots:
        raise ConfigError(
            f"--group-size {config.group_size:,}: a group's samples start together, but even with all "
            f"{config.gpus:,} GPUs rolling out, their {engines:,} engines hold at most {slots:,} {m.name} "
            f"sequences of {context:,.0f} tokens; lower --group-size, --prompt-tokens or --median-tokens, "
            "or add --gpus"
        )


class EpisodeStats:
    """What finished agentic groups did, averaged over about the last batch of them.

    Sums decay by half for every batch of groups that finishes after them: a window that
    follows the workload's drift, but is long enough that one period's completions (the
    short episodes of a cycle first, the stragglers last) do not bias it.
    """

    KEYS = ("samples", "tokens", "extra", "wait_s", "prefill", "context_x_tokens", "sample_s", "span_s")

    def __init__(self, batch_groups: int) -> None:
        self.batch_groups = batch_groups
        self.sums = dict.fromkeys(self.KEYS, 0.0)

    def add(self, engine: RolloutEngine) -> None:
        if not engine.p_groups:
            return
        decay = 0.5 ** (engine.p_groups / self.batch_groups)
        new = (
            engine.p_samples,
            engine.p_tokens,
            engine.p_extra,
            engine.p_wait_s,
            engine.p_prefill,
            engine.p_context_x_tokens,
            engine.p_sample_s,
            engine.p_span_s,
        )
        for key, value in zip(self.KEYS, new, strict=True):
            self.sums[key] = self.sums[key] * decay + value

    def per_sample(self, key: str) -> float:
        n = self.sums["samples"]
        return self.sums[key] / n if n > 0 else 0.0

    @property
    def context_tokens(self) -> float:
        """The context a decode step reads on average (decode-weighted over the episodes)."""
        t = self.sums["tokens"]
        return self.sums["context_x_tokens"] / t if t > 0 else 0.0

    @property
    def running_share(self) -> float:
        """Mean time a sample is in flight over its group's makespan."""
        span = self.sums["span_s"]
        return self.sums["sample_s"] / span if span > 0 else 0.0


class SingleTurnPool:
    """`RolloutPool` behind the agentic pool's interface: one generation per sample."""

    def __init__(self, lengths: LengthModel, config: DcConfig, prefill_tokens: int) -> None:
        self.lengths, self.c, self.prefill_tokens = lengths, config, prefill_tokens
        self.pool = RolloutPool(lengths.max_tokens + prefill_tokens + 1)
        # the lengths of the last two batches' samples, in admission order (a ring)
        self._recent = np.zeros(2 * config.batch_groups * config.group_size)
        self._recent_n = 0

    @property
    def active_samples(self) -> int:
        return self.pool.active_samples

    decoding = active_samples
    inflight_samples = active_samples

    @property
    def inflight_groups(self) -> int:
        return self.pool.inflight_groups

    @property
    def inflight_by_version(self) -> dict[int, int]:
        return self.pool.inflight_by_version

    waiting = 0

    def held_context_tokens(self) -> float:
        """Prompt plus half the length-biased response: the mean context of an active sequence."""
        return self.c.prompt_tokens + 0.5 * (self.pool.length_biased_tokens or self.lengths.median(0.0))

    decode_context_tokens = held_context_tokens

    def admit(
        self, rng: np.random.Generator, groups: int, version: int, progress: float, now: float = 0.0
    ) -> None:
        lengths = self.lengths.draw(rng, groups, self.c.group_size, progress)
        self.pool.admit(lengths, version, self.prefill_tokens)
        flat = lengths.ravel()[-self._recent.size :]
        idx = (self._recent_n + np.arange(flat.size)) % self._recent.size
        self._recent[idx] = flat
        self._recent_n += flat.size

    def length_quantiles(self) -> tuple[tuple[float, ...], float]:
        """Quantiles (and the mean) of the lengths of the batch admitted before the last one:
        by now those samples have mostly finished, so a real engine knows them from its books.
        A period's finished samples would not do: at a tight bound a period sees either the
        short samples of a batch or its tail."""
        size = self._recent.size
        batch = size // 2
        if self._recent_n < batch:
            return (), 0.0
        if self._recent_n < size:
            older = self._recent[: max(self._recent_n - batch, 1)]
        else:
            older = np.roll(self._recent, -(self._recent_n % size))[:batch]
        return tuple(float(q) for q in np.quantile(older, QUANTILE_LEVELS)), float(older.mean())

    def retag(self, version: int) -> None:
        self.pool.retag(version)

    def advance(
        self, rng: np.random.Generator, tokens_per_s: float, dt: float, now: float, engines: int
    ) -> dict[int, Finished]:
        _, done = self.pool.advance(tokens_per_s * dt)
        return {v: Finished(g, tok) for v, (g, tok) in done.items()}


class RolloutEngine:
    """The rollout engines of one run and the sequences they hold."""

    def __init__(
        self, config: DcConfig, roles: GpuRoles, workload: Workload, rng: np.random.Generator, eta: int
    ) -> None:
        self.c, self.m, self.roles, self.rng, self.eta = config, config.model, roles, rng, eta
        self.prefill_tokens = math.ceil(
            config.prompt_tokens * self.m.prefill_per_token_s / self.m.decode_fixed_s
        )
        self.pool: SingleTurnPool | AgenticPool = (
            AgenticPool(workload, self.m, config.prompt_tokens, config.group_size)
            if isinstance(workload, AgenticWorkload)
            else SingleTurnPool(workload, config, self.prefill_tokens)
        )
        self.agentic = isinstance(self.pool, AgenticPool)
        self.weights_version = 0  # the version the engines hold
        self.visible: list[tuple[float, int]] = []  # weight updates on their way: (lands at, version)
        self.pause_until = 0.0  # decoding stops until then (weight update, KV recompute)
        self.admitted_groups = 0
        self.aborted_samples = 0  # sequences moved off engines that left rollout
        self.batches_admitted = 0
        self.batch_left = 0  # batch mode: groups of the current batch still to admit
        self.new_period()

    def new_period(self) -> None:
        """Reset what the allocator measures per control period."""
        self.p_tokens = self.p_extra = self.p_wait_s = self.p_prefill = 0.0
        self.p_context_x_tokens = self.p_sample_s = self.p_span_s = 0.0
        self.p_samples = self.p_groups = 0
        self.p_blocked_s = 0.0

    # -- capacity and throughput ------------------------------------------------------------
    def engines(self) -> tuple[int, int]:
        """(dedicated, lent) engines."""
        return self.roles.rollout // self.m.tp, self.roles.hybrid // self.m.tp

    def slots(self) -> int:
        """Sequences the engines hold at once: KV memory over the mean held context, capped."""
        ctx = self.pool.held_context_tokens() or (self.c.prompt_tokens + 0.5 * self._guess_length())
        own, lent = self.engines()
        slots = own * self.m.engine_slots(ctx)
        if lent:
            slots += lent * self.m.engine_slots(ctx, hybrid=True)
        return slots

    def _guess_length(self) -> float:
        return float(self.c.prompt_tokens)

    def tokens_per_s(self, decoding: int) -> float:
        """Tokens/s of the pool with `decoding` sequences spread over its engines by slots."""
        own, lent = self.engines()
        if own + lent == 0 or decoding == 0:
            return 0.0
        ctx = self.pool.decode_context_tokens()
        held = max(1, self.pool.active_samples)
        share = decoding / held if self.agentic else 1.0
        if not lent:
            return self._class_tokens_per_s(own, decoding, self.m.engine_slots(self._held_ctx()), ctx, share)
        s_own, s_lent = (
            self.m.engine_slots(self._held_ctx()),
            self.m.engine_slots(self._held_ctx(), hybrid=True),
        )
        w_own = own * s_own / (own * s_own + lent * s_lent)
        return self._class_tokens_per_s(own, decoding * w_own, s_own, ctx, share) + self._class_tokens_per_s(
            lent, decoding * (1 - w_own), s_lent, ctx, share
        )

    def _held_ctx(self) -> float:
        return self.pool.held_context_tokens() or self.c.prompt_tokens

    def _class_tokens_per_s(self, engines: int, active: float, slots: int, ctx: float, share: float) -> float:
        if engines == 0 or active <= 0:
            return 0.0
        # Fewer sequences than engines: each runs alone on one, at one token per step (the
        # pool must not lend a lone sequence the speed of idle engines: a batch's tail is slow).
        busy = min(float(engines), active)
        per_engine = active / busy
        running = min(per_engine, float(slots) * share)  # beyond the KV cap, sequences take turns
        step = self.m.decode_step_s(running, running * ctx)
        return busy * running / step

    # -- admission --------------------------------------------------------------------------
    def admit(
        self, buffer: ExperienceBuffer, mode: str, version: int, steps_started: int, now: float
    ) -> None:
        """Start as many groups as the staleness bound (or the batch rule) and free slots allow."""
        c = self.c
        if self.roles.decoding == 0:
            return
        free_slots = self.slots() - self.pool.active_samples
        if self.pool.waiting:  # evicted episodes whose tool returned come before new groups
            assert isinstance(self.pool, AgenticPool)
            before = self.pool.waiting
            self.pool.resume_waiting(free_slots, now)
            free_slots -= before - self.pool.waiting
        # dropped groups leave `accepted`, so they are generated again
        needed = c.steps * c.batch_groups - buffer.accepted - self.pool.inflight_groups
        if mode == "batch":
            if self.batch_left == 0:
                j = self.batches_admitted
                if j >= c.steps or self.pool.inflight_groups or j > steps_started:
                    return
                if self.weights_version < j - self.eta:
                    return  # one-step: generate batch j with weights j - 1
                self.batches_admitted += 1
                self.batch_left = c.batch_groups
            capacity = self.batch_left
        else:
            capacity = (self.eta + self.weights_version + 1) * c.batch_groups - (
                buffer.accepted + self.pool.inflight_groups
            )
            capacity = min(capacity, needed)
        groups = min(capacity, free_slots // c.group_size)
        if groups <= 0:
            return
        self.start_groups(groups, self.weights_version, version / max(1, c.steps - 1), now)
        if mode == "batch":
            self.batch_left -= groups

    def start_groups(self, groups: int, version: int, progress: float, now: float) -> None:
        """Put `groups` new groups on the engines, generated under weights `version`."""
        self.pool.admit(self.rng, groups, version, progress, now)
        self.admitted_groups += groups

    # -- weights and aborts ----------------------------------------------------------------
    def land_weights(self, now: float) -> None:
        while self.visible and self.visible[0][0] <= now + 1e-9:
            self.weights_version = max(self.weights_version, self.visible.pop(0)[1])
            if self.c.sync_mode == "interrupt":
                # AReaL-style interruptible generation: in-flight samples finish under the new
                # weights, so their behaviour version is the new one (decoupled PPO corrects the
                # older prefix); blocking/overlapped keep the version generation started with.
                self.pool.retag(self.weights_version)

    def interrupt_pause_s(self) -> float:
        """Seconds the engines spend recomputing the KV of what they hold under new weights."""
        own, lent = self.engines()
        if self.agentic:
            assert isinstance(self.pool, AgenticPool)
            return self.pool.kv_tokens() * self.m.prefill_per_token_s / max(1, own + lent)
        ctx = self.c.prompt_tokens + 0.5 * self.pool.pool.length_biased_tokens  # type: ignore[union-attr]
        return self.pool.active_samples * ctx * self.m.prefill_per_token_s / max(1, own + lent)

    def abort(self, leaving_engines: int, now: float) -> float:
        """Engines leave rollout: their sequences resume on the others (partial rollout) after
        their KV cache is recomputed there. Returns the GPU-seconds of that recompute."""
        own, lent = self.engines()
        total = own + lent + leaving_engines
        if leaving_engines <= 0 or total == 0 or self.pool.active_samples == 0:
            return 0.0
        share = leaving_engines / total
        self.aborted_samples += round(share * self.pool.active_samples)
        if isinstance(self.pool, AgenticPool):
            engine_s = self.pool.recompute(share)
        else:
            ctx = self.pool.held_context_tokens()
            engine_s = share * self.pool.active_samples * ctx * self.m.prefill_per_token_s
            remaining = max(1, own + lent)
            self.pause_until = max(self.pause_until, now) + engine_s / remaining
        return engine_s * self.m.tp

    # -- the clock -------------------------------------------------------------------------
    def advance(self, dt: float, now: float, buffer: ExperienceBuffer) -> None:
        """Decode for dt seconds (unless paused) and put the groups that finished into the buffer."""
        own, lent = self.engines()
        paused = now < self.pause_until - 1e-9
        decoding = self.pool.decoding
        if not self.agentic and (paused or own + lent == 0 or decoding == 0):
            return
        per_seq = 0.0
        if not paused and decoding:
            per_seq = self.tokens_per_s(decoding) / decoding
        done = self.pool.advance(self.rng, per_seq, dt, now, 0 if paused else own + lent)
        for version, f in done.items():
            buffer.put(version, f.groups, f.tokens, f.extra_tokens)
            self.p_tokens += f.tokens
            self.p_extra += f.extra_tokens
            self.p_wait_s += f.wait_s
            self.p_prefill += f.prefill_tokens
            self.p_context_x_tokens += f.context_x_tokens
            self.p_sample_s += f.sample_s
            self.p_span_s += f.makespan_s * self.c.group_size
            self.p_samples += f.groups * self.c.group_size
            self.p_groups += f.groups
