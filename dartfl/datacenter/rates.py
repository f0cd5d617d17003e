"""The rate model DART scores splits with: training and rollout groups/s per candidate split.

Training is one batch per step on the GPUs a split leaves the trainer. Rollout is the rate at
which the engines deliver batches under the staleness bound's admission rule (a cycle: at a
tight bound admission waits on each step's weights), from the decode rate of the groups in
flight. For agentic episodes (`obs.multi_turn`) a sequence in flight is either decoding or
waiting for a tool: with its KV cache kept it holds memory while it waits, so fewer of an
engine's slots decode; and prefill (prompt, tool outputs, evicted contexts) takes engine time.
The derivation is in docs/datacenter.md ("DART for rollout/training").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dartfl.datacenter.drain import tight_bound_rate
from dartfl.datacenter.types import DcObservation

__all__ = [
    "DECODING_SHARE",
    "decode_rate",
    "drift_plus_penalty",
    "predicted_rates",
    "rollout_rate",
    "steering_buffer",
    "training_step_s",
]

FloatArray = npt.NDArray[np.float64]

# Share of an in-flight GRPO group's samples still decoding: the rest have finished and wait
# for the group's longest sample (mean length / mean longest of the group). Measured in the
# simulator for the default workload (log-normal lengths, sigma 0.99, groups of 8), averaged
# over time: 0.44-0.49 at every staleness bound from 0 to 6. What the bound changes is how
# many groups are in flight (`rollout_rate`), not this share.
DECODING_SHARE = 0.45


def training_step_s(obs: DcObservation, rollout_gpus: FloatArray, length: float) -> FloatArray:
    """Seconds of one training step on the GPUs a split leaves the trainer.

    B groups of (prompt + length) tokens, data-parallel with a small all-reduce loss per
    doubling, plus per-minibatch overhead and the part of the weight sync the trainer waits for.
    """
    m = obs.model
    train_gpus = np.maximum(obs.gpus - rollout_gpus, 1.0)
    # agentic: the trainer also runs every tool output through the model (masked from the loss)
    tokens = obs.batch_groups * obs.group_size * (obs.prompt_tokens + length + obs.mean_extra_tokens)
    efficiency = 1.0 / (1.0 + 0.02 * np.log2(train_gpus))
    sync_wait = m.sync_low_s if obs.sync_mode == "overlapped" else m.sync_s
    compute_s = tokens * m.train_per_token_gpu_s / (train_gpus * efficiency) + 4 * m.minibatch_overhead_s
    step_s: FloatArray = compute_s + sync_wait
    return step_s


def decoding_per_engine(
    obs: DcObservation, engines: FloatArray, groups: FloatArray, context: float
) -> FloatArray:
    """Sequences each engine with work decodes while `groups` groups are in flight, capped by
    KV memory (at least one: with fewer sequences than engines, each runs alone on one)."""
    slots = float(obs.model.engine_slots(context))
    decoding = DECODING_SHARE * obs.group_size * groups / engines
    per_engine: FloatArray = np.minimum(slots, np.maximum(1.0, decoding))
    return per_engine


def busy_engines(obs: DcObservation, engines: FloatArray, groups: FloatArray) -> FloatArray:
    """Engines with a sequence to decode: all of them, or one per decoding sequence."""
    busy: FloatArray = np.minimum(engines, np.maximum(DECODING_SHARE * obs.group_size * groups, 1e-9))
    return busy


def decode_rate(
    obs: DcObservation, engines: FloatArray, groups: FloatArray, length: float, context: float
) -> FloatArray:
    """Groups/s the engines complete while `groups` groups are in flight.

    A decode step with p sequences on an engine takes a + p (b + c ctx) and moves each one
    token on; a group is done after n samples of `length` tokens.
    """
    if obs.multi_turn:
        return _episode_rate(obs, engines, groups, length, context)
    m = obs.model
    per_engine = decoding_per_engine(obs, engines, groups, context)
    decode_s = m.decode_fixed_s + per_engine * (m.decode_per_seq_s + m.decode_per_kv_token_s * context)
    busy = busy_engines(obs, engines, groups)
    rate: FloatArray = busy * per_engine / decode_s / (obs.group_size * max(1.0, length))
    return rate


def _episode_rate(
    obs: DcObservation, engines: FloatArray, groups: FloatArray, length: float, context: float
) -> FloatArray:
    """Groups/s of agentic episodes: a sequence in flight decodes for D = length x step
    seconds and waits W for tools, so a share phi = D / (D + W) of them decodes. With the KV
    cache kept, waiting sequences hold their slots (held = min(slots, in flight), decoding =
    phi x held); evicted, only decoding ones do (decoding = min(slots, phi x in flight)). The
    step time depends on how many decode, so phi is found by a few fixed-point rounds. Prefill
    takes engine time p per sample: r samples/s of decoding leave r / (1 + r p)."""
    m = obs.model
    share = obs.running_share if obs.running_share > 0 else DECODING_SHARE
    slots = float(m.engine_slots(context))
    inflight = np.maximum(1.0, share * obs.group_size * groups / engines)
    per_seq = m.decode_per_seq_s + m.decode_per_kv_token_s * context
    tokens = max(1.0, length)
    phi = np.ones_like(inflight)
    decoding = inflight
    step = np.full_like(inflight, m.decode_fixed_s)
    for _ in range(5):
        decoding = np.minimum(slots, inflight) * phi if obs.kv_kept else np.minimum(slots, inflight * phi)
        decoding = np.maximum(decoding, 1e-9)
        step = m.decode_fixed_s + decoding * per_seq
        decode_s = tokens * step
        phi = decode_s / (decode_s + obs.mean_env_wait_s)
    samples = decoding / (tokens * step)  # per engine per second
    samples = samples / (1.0 + samples * obs.mean_prefill_tokens * m.prefill_per_token_s)
    rate: FloatArray = engines * samples / obs.group_size
    return rate


def rollout_rate(
    obs: DcObservation, rollout_gpus: FloatArray, length: float, step_s: FloatArray
) -> FloatArray:
    """Groups/s rollout delivers under AReaL's admission rule, one batch per training step.

    The rule lets (accepted + running) groups reach (eta + version + 1) B. While a step
    trains, that leaves buffer + in flight <= eta B: nothing is admitted, the pool drains and
    b0 groups finish. When the step's weights land, B more groups are admitted; rollout pauses
    for the update (interrupted, it also recomputes the KV cache of what still decodes), then
    runs with up to (eta + 1) B - buffer in flight until the buffer holds the next batch. With
    the buffer filling linearly (0 to b0 during the step, b0 to B after it), the mean in flight
    is eta B - b0 / 2 during the step and (eta + 1/2) B - b0 / 2 after it. The rate is B over
    the time to make a batch this way. Under a loose bound both phases decode as fast and it
    is the plain decode rate; at eta = 0 nothing decodes during the step, so a batch costs
    the rollout time plus the training time, and more rollout GPUs can lower it.
    """
    m, batch = obs.model, float(obs.batch_groups)
    context = obs.active_context_tokens if obs.active_context_tokens > 0 else obs.prompt_tokens + length
    if obs.eta == 0 and obs.length_quantiles and not obs.multi_turn:
        return tight_bound_rate(obs, rollout_gpus, step_s, context)  # a batch waits on its tail
    engines = np.maximum(rollout_gpus / obs.tp, 1e-9)
    bound = obs.eta * batch
    # 1. During the step: b0 and the in-flight count it leaves settle in a few rounds.
    finished = np.zeros_like(rollout_gpus)
    during = np.zeros_like(rollout_gpus)
    for _ in range(3):
        inflight = bound - finished / 2
        during = np.where(inflight > 0, decode_rate(obs, engines, inflight, length, context), 0.0)
        finished = np.minimum(during * step_s, min(bound, batch))
    # 2. After it: the pause, then B more groups in flight.
    pause_s = np.full_like(rollout_gpus, 0.0 if obs.sync_mode == "overlapped" else m.sync_s)
    if obs.sync_mode == "interrupt":
        decoding = decoding_per_engine(obs, engines, bound - finished, context)
        pause_s += np.where(bound > finished, decoding * context * m.prefill_per_token_s, 0.0)
    after = decode_rate(obs, engines, bound + (batch - finished) / 2, length, context)
    # 3. The time to make a batch: within the step if rollout is that fast, else the step and
    #    the rest at the rate after it.
    fast = during * step_s >= batch
    make_s = np.where(
        fast,
        batch / np.maximum(during, 1e-12),
        step_s + (batch - during * step_s) / np.maximum(after, 1e-12),
    )
    rate: FloatArray = batch / (pause_s + make_s)
    return rate


def predicted_rates(
    obs: DcObservation, rollout_gpus: FloatArray, length: float
) -> tuple[FloatArray, FloatArray]:
    """(rollout, training) groups/s for each candidate split, from the cost model.

    Training: one batch per `training_step_s`, if the split leaves the trainer its minimum.
    Rollout: `rollout_rate`, the batches it delivers under the staleness bound; it depends on
    the training step too, since admission waits on each step's weights.
    """
    step_s = training_step_s(obs, rollout_gpus, length)
    train = np.where(obs.gpus - rollout_gpus >= obs.train_min_gpus, obs.batch_groups / step_s, 0.0)
    return rollout_rate(obs, rollout_gpus, length, step_s), train


def drift_plus_penalty(
    rollout: FloatArray, train: FloatArray, buffer_groups: float, batch_groups: int, kappa: float
) -> FloatArray:
    """J per candidate split: throughput minus kappa times the buffer's drift (module docstring).

    The buffer's pull is bounded at one batch either way: admission control already bounds
    the buffer, and a deep one under a loose staleness bound means rollout is running ahead,
    not a backlog to drain at any cost. Unbounded, kappa * backlog >= 1 turns J into a pure
    preference for one side and walks the split to an extreme (measured at eta = 6).
    """
    backlog = min(1.0, max(-1.0, (buffer_groups - batch_groups) / batch_groups))
    result: FloatArray = np.minimum(rollout, train) - kappa * backlog * (rollout - train)
    return result


def steering_buffer(buffer_groups: float, batch_groups: int, rollout: FloatArray, train: FloatArray) -> float:
    """The buffer level the simulator's DART steers by.

    A short buffer pulls towards a batch ready when the trainer finishes, which needs a split
    where rollout keeps up. Where this model's admission cycle lets none (at eta 0 the bound
    admits nothing while a step trains: rollout and training take turns), the buffer is short
    at every split and its level only marks the cycle's phase, so it counts as one batch (no
    pull): pulling walked the split towards rollout and back with each cycle. The Ray
    controller's model has no such cycle, so it steers by the buffer as it is.
    """
    if buffer_groups < batch_groups and not np.any(rollout > train):
        return float(batch_groups)
    return float(buffer_groups)
