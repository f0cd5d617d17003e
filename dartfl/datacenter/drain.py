"""Rollout at the tightest staleness bound (eta 0): a batch waits on its tail.

At eta 0 AReaL's admission rule lets a batch start only when the weights of a step land, and
the step that trains it needs all of its groups. So a batch is admitted at once and
drains: all its sequences decode together at first, fewer and fewer as the short ones
finish, and the last ones run at the speed of one sequence per engine however many engines
there are (the tail). With the sample lengths' quantiles L_1 <= ... <= L_K at levels p_1 < ... <
p_K = 1 of N sequences, the drain takes

    D(E) = sum_k (L_k - L_{k-1}) * active_k * step(running_k) / (busy_k * running_k),

active_k = N (1 - p_{k-1}) sequences left, busy_k = min(E, active_k) engines with work,
running_k = min(active_k / busy_k, slots) per busy engine (beyond the KV slots sequences
take turns), step(p) = a + p (b + c ctx) the decode step. It
is the simulator's token clock integrated by hand.

The loop: with C the step's compute, w the part of the weight sync the trainer waits and s
the time until the new weights reach the engines (pause), a batch j admitted at the landing
of version j - eta starts its step at s_j = max(e_{j-1} + w, l_{j-eta} + D). In steady state
(period X): eta 0 gives X = C + s + D (rollout and training take turns), and the rate is
B / X. (eta 1 would give X = max(C + w, (C + s + D) / 2), but there the next batch drains
during the previous one's tail, on the same engines, so D depends on the split more than an
isolated drain: that formula's optimum was flatter than the simulator's, and DART keeps the
cycle model of dartfl/datacenter/rates.py at eta >= 1; docs/datacenter.md has the numbers.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dartfl.datacenter.types import QUANTILE_LEVELS, DcObservation

__all__ = ["drain_s", "tight_bound_rate"]

FloatArray = npt.NDArray[np.float64]


def drain_s(obs: DcObservation, engines: FloatArray, sequences: float, context: float) -> FloatArray:
    """Seconds for `sequences` sequences started together to finish on each engine count.

    A sequence's prompt prefill holds it for a number of decode steps first (the simulator's
    convention), so it counts as that many tokens of clock before its response."""
    m = obs.model
    prefill = np.ceil(obs.prompt_tokens * m.prefill_per_token_s / m.decode_fixed_s)
    lengths = np.asarray(obs.length_quantiles, dtype=np.float64) + prefill
    levels = (
        QUANTILE_LEVELS
        if lengths.size == QUANTILE_LEVELS.size
        else np.arange(1, lengths.size + 1) / lengths.size
    )
    slots = float(m.engine_slots(context))
    per_seq = m.decode_per_seq_s + m.decode_per_kv_token_s * context
    widths = np.diff(np.concatenate(([0.0], lengths)))  # tokens of clock per quantile band
    active = sequences * (1.0 - np.concatenate(([0.0], levels[:-1])))  # sequences left in each band
    busy = np.minimum(engines[:, None], np.maximum(active[None, :], 1e-9))
    running = np.minimum(active[None, :] / busy, slots)
    step = m.decode_fixed_s + running * per_seq
    seconds: FloatArray = (widths[None, :] * active[None, :] * step / (busy * running)).sum(axis=1)
    return seconds


def tight_bound_rate(
    obs: DcObservation, rollout_gpus: FloatArray, step_s: FloatArray, context: float
) -> FloatArray:
    """Groups/s of the whole loop at eta 0 (module docstring), per candidate split."""
    m = obs.model
    engines = np.maximum(rollout_gpus / obs.tp, 1e-9)
    wait = m.sync_low_s if obs.sync_mode == "overlapped" else m.sync_s
    compute = step_s - wait
    drain = drain_s(obs, engines, obs.batch_groups * obs.group_size, context)
    period = compute + m.sync_s + drain
    rate: FloatArray = obs.batch_groups / period
    return rate
