"""`dart`: the edge allocator's drift-plus-penalty decision, applied to rollout vs training GPUs.

The experience buffer is the real queue Q (groups ready to train); the penalty is minus the
training throughput. Every period, over every feasible integer split R (rollout GPUs, a
multiple of the engine's TP size), DART scores

    J(R) = min(A(R), S(G - R)) - kappa * (Q - Q*) / B * (A(R) - S(G - R))

with A the rollout rate and S the training rate (groups/s) predicted from the profiled cost
model at the current measured response length, Q* one batch, B the batch. A is the rate at
which rollout delivers batches under the staleness bound's admission rule, so at a tight
bound it already counts the training step rollout waits on. The first term
is the penalty (throughput); the second is the drift of L = (Q - Q*)^2 / 2: a full buffer
pushes GPUs to training, an empty one to rollout. A move pays a switch cost (dead GPU
seconds), so DART moves only when the predicted gain over a hold horizon repays it and
exceeds a hysteresis band. The derivation is in docs/datacenter.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.datacenter.policies.base import DcPolicy
from dartfl.datacenter.types import DcAllocation, DcObservation
from dartfl.errors import ConfigError

__all__ = ["DcDartConfig", "DcDartPolicy", "drift_plus_penalty", "predicted_rates", "steering_buffer"]

FloatArray = npt.NDArray[np.float64]

# Share of an in-flight GRPO group's samples still decoding: the rest have finished and wait
# for the group's longest sample (mean length / mean longest of the group). Measured in the
# simulator for the default workload (log-normal lengths, sigma 0.99, groups of 8), averaged
# over time: 0.44-0.49 at every staleness bound from 0 to 6. What the bound changes is how
# many groups are in flight (`rollout_rate`), not this share.
DECODING_SHARE = 0.45


@dataclass(frozen=True)
class DcDartConfig:
    kappa: float = 0.2  # weight of the buffer's drift against throughput
    hysteresis: float = 0.05  # least relative throughput gain worth a move
    hold_periods: float = 30.0  # horizon (periods) over which a move must repay its dead time
    smoothing: float = 0.3  # EWMA weight of a new length measurement
    window: int = 12  # periods of measured rates that correct the cost model
    max_move: float = 0.125  # most of the cluster one decision moves

    def __post_init__(self) -> None:
        for name in ("kappa", "hysteresis", "hold_periods"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"dart knob {name} must be a finite number >= 0, got {value}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ConfigError(f"dart smoothing must lie in (0, 1], got {self.smoothing}")


def training_step_s(obs: DcObservation, rollout_gpus: FloatArray, length: float) -> FloatArray:
    """Seconds of one training step on the GPUs a split leaves the trainer.

    B groups of (prompt + length) tokens, data-parallel with a small all-reduce loss per
    doubling, plus per-minibatch overhead and the part of the weight sync the trainer waits for.
    """
    m = obs.model
    train_gpus = np.maximum(obs.gpus - rollout_gpus, 1.0)
    tokens = obs.batch_groups * obs.group_size * (obs.prompt_tokens + length)
    efficiency = 1.0 / (1.0 + 0.02 * np.log2(train_gpus))
    sync_wait = m.sync_low_s if obs.sync_mode == "overlapped" else m.sync_s
    compute_s = tokens * m.train_per_token_gpu_s / (train_gpus * efficiency) + 4 * m.minibatch_overhead_s
    step_s: FloatArray = compute_s + sync_wait
    return step_s


def decoding_per_engine(
    obs: DcObservation, engines: FloatArray, groups: FloatArray, context: float
) -> FloatArray:
    """Sequences each engine decodes while `groups` groups are in flight, capped by KV memory."""
    slots = float(obs.model.engine_slots(context))
    decoding = DECODING_SHARE * obs.group_size * groups / engines
    per_engine: FloatArray = np.minimum(slots, np.maximum(1.0, decoding))
    return per_engine


def decode_rate(
    obs: DcObservation, engines: FloatArray, groups: FloatArray, length: float, context: float
) -> FloatArray:
    """Groups/s the engines complete while `groups` groups are in flight.

    A decode step with p sequences on an engine takes a + p (b + c ctx) and moves each one
    token on; a group is done after n samples of `length` tokens.
    """
    m = obs.model
    per_engine = decoding_per_engine(obs, engines, groups, context)
    decode_s = m.decode_fixed_s + per_engine * (m.decode_per_seq_s + m.decode_per_kv_token_s * context)
    rate: FloatArray = engines * per_engine / decode_s / (obs.group_size * max(1.0, length))
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
    if buffer_groups < batch_groups and not np.any(rollout >= train):
        return float(batch_groups)
    return float(buffer_groups)


class DcDartPolicy(DcPolicy):
    mode = "stream"

    def __init__(self, config: DcDartConfig | None = None) -> None:
        self.config = config or DcDartConfig()
        self.name = "dart"
        self.length = 0.0
        self.rollout_gain = 1.0  # measured / predicted, when each side ran flat out
        self.train_gain = 1.0
        self._candidates: FloatArray | None = None
        self._window: list[tuple[float, float, float, float]] = []
        self._window_split = -1

    def reset(self) -> None:
        self.length = 0.0
        self.rollout_gain = self.train_gain = 1.0
        self._candidates = None
        self._window = []
        self._window_split = -1

    def update(self, obs: DcObservation) -> None:
        """Track the response length and how far the cost model is off.

        Rates are measured over a window of `window` periods at an unchanged split (steps
        finish in lumps, so one period says little), and only once a step has trained: before
        it the pipeline is filling and only a batch's short samples have finished (a 32B run
        measured 0.8x the rollout rate there and kept the wrong split). A side's measured rate
        corrects the model only while it was the bottleneck: rollout never blocked by
        admission control, or the trainer never short of data.
        """
        if obs.mean_response_tokens > 0:
            w = self.config.smoothing
            self.length = (
                obs.mean_response_tokens
                if self.length <= 0
                else ((1 - w) * self.length + w * obs.mean_response_tokens)
            )
        if obs.switching_gpus or obs.rollout_gpus != self._window_split or obs.version == 0:
            self._window = []
            self._window_split = obs.rollout_gpus
            return
        self._window.append(
            (
                obs.measured_rollout_groups_per_s,
                obs.measured_train_groups_per_s,
                obs.admission_blocked_share,
                float(obs.buffer_groups < obs.batch_groups),
            )
        )
        if len(self._window) < self.config.window or self.length <= 0:
            return
        win = self._window[-self.config.window :]
        rolled, trained = sum(x[0] for x in win) / len(win), sum(x[1] for x in win) / len(win)
        blocked, starved = sum(x[2] for x in win) / len(win), sum(x[3] for x in win) / len(win)
        rollout, train = predicted_rates(obs, np.array([float(obs.rollout_gpus)]), self.length)
        g = 0.5
        if blocked < 0.1 and rolled > 0 and rollout[0] > 0:
            ratio = float(np.clip(rolled / rollout[0], 0.2, 5.0))
            self.rollout_gain = (1 - g) * self.rollout_gain + g * ratio
        if starved < 0.1 and trained > 0 and train[0] > 0:
            ratio = float(np.clip(trained / train[0], 0.2, 5.0))
            self.train_gain = (1 - g) * self.train_gain + g * ratio
        self._window = []

    def decide(self, obs: DcObservation) -> DcAllocation:
        cfg = self.config
        current = obs.rollout_gpus
        if obs.switching_gpus > 0 and current > 0:
            return DcAllocation(current)  # let the last move land before judging it
        tp = obs.tp
        most = (obs.gpus - obs.train_min_gpus) // tp * tp
        if self._candidates is None or self._candidates.size != most // tp:
            self._candidates = np.arange(tp, most + 1, tp, dtype=np.float64)
        candidates = self._candidates
        # 1. Length: the measured one; before any measurement, the model's prompt-sized guess.
        length = self.length if self.length > 0 else 4.0 * obs.prompt_tokens
        # 2. Predicted rates per split and the drift-plus-penalty score.
        rollout, train = predicted_rates(obs, candidates, length)
        rollout, train = rollout * self.rollout_gain, train * self.train_gain
        throughput = np.minimum(rollout, train)
        buffer = steering_buffer(obs.buffer_groups, obs.batch_groups, rollout, train)
        score = drift_plus_penalty(rollout, train, buffer, obs.batch_groups, cfg.kappa)
        best = int(np.argmax(score))
        target = int(candidates[best])
        step = max(tp, int(cfg.max_move * obs.gpus) // tp * tp)
        target = int(np.clip(target, current - step, current + step)) if current > 0 else target
        if current <= 0:
            return DcAllocation(target)
        # 3. Hysteresis and switch cost: the gain over the hold horizon must repay the dead time.
        here = int(np.clip(round(current / tp) - 1, 0, candidates.size - 1))
        there = int(np.clip(round(target / tp) - 1, 0, candidates.size - 1))
        gain = float(score[there] - score[here])
        scale = max(float(throughput[best]), 1e-12)
        moved = abs(target - current)
        dead_groups = moved * obs.model.switch_s * scale / obs.gpus
        if gain <= cfg.hysteresis * scale or gain * cfg.hold_periods * obs.period_s <= dead_groups:
            return DcAllocation(current)
        return DcAllocation(target)
