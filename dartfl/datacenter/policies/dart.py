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
from dartfl.datacenter.rates import drift_plus_penalty, predicted_rates, steering_buffer
from dartfl.datacenter.types import DcAllocation, DcObservation
from dartfl.errors import ConfigError
from dartfl.unit_split import SplitRule, choose_split

__all__ = ["DcDartConfig", "DcDartPolicy"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class DcDartConfig:
    kappa: float = 0.1  # weight of the buffer's drift against throughput
    hysteresis: float = 0.02  # least relative gain of the smoothed score worth a move
    hold_periods: float = 30.0  # horizon (periods) over which a move must repay its dead time
    smoothing: float = 0.3  # EWMA weight of a new length measurement
    score_smoothing: float = 0.1  # EWMA weight of a period's scores (1: judge each period alone)
    window: int = 12  # periods of measured rates that correct the cost model
    max_move: float = 0.125  # most of the cluster one decision moves

    def __post_init__(self) -> None:
        # Upper bounds past any meaning, which keep the score finite: kappa >= 1 already lets
        # the buffer's pull (|backlog| <= 1) outweigh throughput, and 1e308 made J NaN;
        # a gain of the whole score or more never clears the band; a million periods is
        # months at the default 10 s.
        for name, most in (("kappa", 100.0), ("hysteresis", 1.0), ("hold_periods", 1e6)):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= most):
                raise ConfigError(
                    f"dart knob {_KNOB_KEYS[name]} must be a number in [0, {most:g}], got {value}"
                )
        for name in ("smoothing", "score_smoothing"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"dart {name} must lie in (0, 1], got {value}")


# The spec keys of the knobs `DcDartConfig` checks (dartfl.datacenter.policies' registry).
_KNOB_KEYS = {"kappa": "kappa", "hysteresis": "hysteresis", "hold_periods": "hold"}


class DcDartPolicy(DcPolicy):
    mode = "stream"

    def __init__(self, config: DcDartConfig | None = None) -> None:
        self.config = config or DcDartConfig()
        self.name = "dart"
        self.length = 0.0
        self.rollout_gain = 1.0  # measured / predicted, when each side ran flat out
        self.train_gain = 1.0
        self._candidates: FloatArray | None = None
        self._score: FloatArray | None = None  # the smoothed J per candidate
        self._window: list[tuple[float, float]] = []
        self._window_split = -1
        self._steps = _StepSpan()

    def reset(self) -> None:
        self.length = 0.0
        self.rollout_gain = self.train_gain = 1.0
        self._candidates = None
        self._score = None
        self._window = []
        self._window_split = -1
        self._steps = _StepSpan()

    def update(self, obs: DcObservation) -> None:
        """Track the response length and how far the cost model is off.

        Rates are measured at an unchanged split, and only once a step has trained: before
        it the pipeline is filling and only a batch's short samples have finished (a 32B run
        measured 0.8x the rollout rate there and kept the wrong split). A side's measured rate
        corrects the model only while it was the bottleneck: rollout never blocked by
        admission control, or the trainer never short of data. Rollout is read over a window
        of `window` periods (groups finish a few at a time); training from one step's end to
        a later one's, `_StepSpan`.
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
            self._steps = _StepSpan()
            return
        if self.length <= 0:
            return
        g = 0.5
        trained = self._steps.observe(
            obs.measured_train_groups_per_s * obs.period_s,
            obs.period_s,
            starved=obs.buffer_groups < obs.batch_groups,
            least_s=self.config.window * obs.period_s,
        )
        if trained is not None:
            train = predicted_rates(obs, np.array([float(obs.rollout_gpus)]), self.length)[1]
            if train[0] > 0:
                ratio = float(np.clip(trained / train[0], 0.2, 5.0))
                self.train_gain = (1 - g) * self.train_gain + g * ratio
        self._window.append((obs.measured_rollout_groups_per_s, obs.admission_blocked_share))
        if len(self._window) < self.config.window:
            return
        win = self._window[-self.config.window :]
        rolled, blocked = sum(x[0] for x in win) / len(win), sum(x[1] for x in win) / len(win)
        rollout = predicted_rates(obs, np.array([float(obs.rollout_gpus)]), self.length)[0]
        if blocked < 0.1 and rolled > 0 and rollout[0] > 0:
            ratio = float(np.clip(rolled / rollout[0], 0.2, 5.0))
            self.rollout_gain = (1 - g) * self.rollout_gain + g * ratio
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
            self._score = None
        candidates = self._candidates
        # 1. Length: the measured one; before any measurement, the model's prompt-sized guess.
        #    At eta 0, the mean of the last finished batch (a period's finishes are either a
        #    batch's short samples or its tail), which the batch-drain model also reads.
        length = self.length if self.length > 0 else 4.0 * obs.prompt_tokens
        if obs.quantile_mean_tokens > 0 and obs.eta == 0:
            length = obs.quantile_mean_tokens
        # 2. Predicted rates per split and the drift-plus-penalty score.
        rollout, train = predicted_rates(obs, candidates, length)
        rollout, train = rollout * self.rollout_gain, train * self.train_gain
        throughput = np.minimum(rollout, train)
        buffer = steering_buffer(obs.buffer_groups, obs.batch_groups, rollout, train)
        score = self._smoothed(drift_plus_penalty(rollout, train, buffer, obs.batch_groups, cfg.kappa))
        step = max(tp, int(cfg.max_move * obs.gpus) // tp * tp)
        if current <= 0:
            return DcAllocation(int(candidates[int(np.argmax(score))]))
        # 3. Hysteresis and switch cost: the gain over the hold horizon must repay the dead time.
        scale = max(float(throughput[int(np.argmax(score))]), 1e-12)
        rule = SplitRule(
            dead_up_s=obs.model.switch_s,
            dead_down_s=obs.model.switch_s,
            hold_s=cfg.hold_periods * obs.period_s,
            hysteresis=cfg.hysteresis,
            max_step=step,
        )
        decision = choose_split(
            candidates.astype(np.int64), current, score, units=obs.gpus, scale=scale, rule=rule
        )
        return DcAllocation(decision.split)

    def _smoothed(self, score: FloatArray) -> FloatArray:
        """J averaged over the last periods (an EWMA). A period's J swings with the buffer, which
        a training step empties in one lump, and with the length of the few episodes that just
        finished: judged alone, a move worth a few percent cannot be told from that noise, and a
        split chosen while the pipeline filled stays put (an agentic 30B-A3B run held a split
        3.6% below the best static one for its whole length: docs/datacenter.md)."""
        if self._score is None:
            self._score = score.copy()
        else:
            self._score += self.config.score_smoothing * (score - self._score)
        return self._score


class _StepSpan:
    """The trainer's measured rate, read from the end of one step to the end of a later one.

    Steps finish in lumps of a whole batch. A fixed window that counts only the windows in
    which a step finished reads a step longer than the window as one batch per window: on 16
    GPUs of `agentic-swe` (three to five trainer GPUs, steps of several minutes against a
    120-s window) that read training 4.6x faster than it was, and DART moved GPUs to rollout
    until the trainer was the bottleneck (0.66x the best static split, docs/datacenter.md).
    From one step's end to a later one's, the groups trained over the time between them is
    the rate, whatever the step's length. A span in which the trainer was short of data for
    a tenth of its periods or more is not read: its rate measures the data, not the trainer.
    """

    def __init__(self) -> None:
        self.started = False
        self.groups = 0.0  # trained after the span's first step end
        self.periods = 0
        self.starved = 0  # periods of the span that ended with less than a batch buffered
        self.seconds = 0.0

    def observe(self, groups: float, period_s: float, *, starved: bool, least_s: float) -> float | None:
        """Take one period's trained groups; the rate (groups/s) once the span, ended by a
        step's end, covers at least `least_s`, else None."""
        if not self.started:
            # The span opens at a step's end: the periods before it hold part of a step.
            self.started = groups > 0
            return None
        self.seconds += period_s
        self.groups += groups
        self.periods += 1
        self.starved += starved
        if groups <= 0 or self.seconds < least_s:
            return None
        rate = self.groups / self.seconds if self.starved < 0.1 * self.periods else None
        self.groups, self.seconds, self.periods, self.starved = 0.0, 0.0, 0, 0  # opens at this end
        return rate
