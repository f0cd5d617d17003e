"""Online estimators the executor feeds every control period: arrival rates and service times.

Both run inside the control loop (every 0.25 s by default, next to an allocator budget of about
20 us), so they use plain floats and lists: no numpy, no allocation beyond the tuples they
return. Time is passed in (`dt_s`), never read from a clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dartfl.errors import ConfigError

__all__ = ["EwmaRates", "ServiceTimeProfiler"]

# The fast rate estimate forgets this many times faster than the slow one.
FAST_SPEEDUP = 8.0


class EwmaRates:
    """Per-task arrival rates as exponentially weighted moving averages of counts / dt.

    With alpha = 1 - exp(-dt / T) the estimate forgets at the same speed in wall time whatever
    the period, so a late or short period does not distort it. Two estimates run side by side:
    a slow one (time constant T, the rate to plan with) and a fast one (T / 8) that sees a
    burst within a period or two; `peak_rates_per_s` is the larger of the two per task.
    The first update starts both from the observation instead of ramping up from zero.
    """

    def __init__(self, num_tasks: int, time_constant_s: float = 2.0) -> None:
        if not (isinstance(num_tasks, int) and num_tasks >= 1):
            raise ConfigError(f"EwmaRates needs num_tasks >= 1, got {num_tasks!r}")
        if not (math.isfinite(time_constant_s) and time_constant_s > 0):
            raise ConfigError(
                f"EwmaRates time_constant_s must be a finite number > 0, got {time_constant_s!r}"
            )
        self.num_tasks = num_tasks
        self.time_constant_s = float(time_constant_s)
        self._slow = [0.0] * num_tasks
        self._fast = [0.0] * num_tasks
        self._started = False
        # The period is nearly always the same: cache the two alphas for the last dt.
        self._last_dt_s = -1.0
        self._alpha_slow = 0.0
        self._alpha_fast = 0.0

    def update(self, counts: Sequence[int], dt_s: float) -> None:
        """Fold in `counts[k]` arrivals of task k observed over the last `dt_s` seconds."""
        if len(counts) != self.num_tasks:
            raise ConfigError(f"EwmaRates.update got {len(counts)} counts, expected {self.num_tasks}")
        if not (dt_s > 0 and math.isfinite(dt_s)):
            raise ConfigError(f"EwmaRates.update needs a finite dt_s > 0, got {dt_s!r}")
        if min(counts) < 0:
            raise ConfigError(f"EwmaRates.update got a negative arrival count: {list(counts)}")
        inv_dt = 1.0 / dt_s
        slow, fast = self._slow, self._fast
        if not self._started:
            for k in range(self.num_tasks):
                slow[k] = fast[k] = float(counts[k]) * inv_dt
            self._started = True
            return
        if dt_s != self._last_dt_s:
            self._last_dt_s = dt_s
            self._alpha_slow = -math.expm1(-dt_s / self.time_constant_s)
            self._alpha_fast = -math.expm1(-dt_s * FAST_SPEEDUP / self.time_constant_s)
        a_slow, a_fast = self._alpha_slow, self._alpha_fast
        for k in range(self.num_tasks):
            rate = float(counts[k]) * inv_dt
            slow[k] += a_slow * (rate - slow[k])
            fast[k] += a_fast * (rate - fast[k])

    @property
    def started(self) -> bool:
        """Whether any update has been seen (before it, every rate reads 0)."""
        return self._started

    @property
    def rates_per_s(self) -> tuple[float, ...]:
        """The slow estimate per task: the rate to plan capacity with."""
        return tuple(self._slow)

    @property
    def fast_rates_per_s(self) -> tuple[float, ...]:
        """The fast estimate per task (time constant T / 8)."""
        return tuple(self._fast)

    @property
    def peak_rates_per_s(self) -> tuple[float, ...]:
        """max(fast, slow) per task: reacts to a burst at once, decays no faster than the slow one."""
        return tuple(f if f > s else s for f, s in zip(self._fast, self._slow, strict=True))

    def reset(self) -> None:
        """Forget everything, as if newly built."""
        for k in range(self.num_tasks):
            self._slow[k] = 0.0
            self._fast[k] = 0.0
        self._started = False


class ServiceTimeProfiler:
    """Online fit of a work item's duration t = a + c * b from observed (b, t) pairs.

    The fit is weighted least squares with exponential forgetting (weight `forgetting`**age),
    kept as weighted means and co-moments updated in West's numerically stable form, so a
    drifting device (thermal throttling, a new model width) is tracked with an effective
    memory of about 1 / (1 - forgetting) observations.

    Until two distinct batch sizes have been seen (and whenever the remembered batch sizes
    are too alike to separate a from c) the estimates are the last good fit, or the prior if
    there is none. The fit is clamped to a >= 0 and c > 0. Observations that are not finite,
    negative, or have items < 1 are ignored; a duration more than `outlier_ratio` times the
    current prediction is capped at that bound before it is folded in, so one stall cannot
    blow the estimates up, while a real, lasting slowdown is still followed (geometrically,
    by up to `outlier_ratio` per observation, when it is larger than that).
    """

    # Batch-size variance (items^2) below which a and c cannot be told apart.
    _MIN_VARIANCE_ITEMS2 = 1e-2

    def __init__(
        self,
        prior_fixed_s: float,
        prior_per_item_s: float,
        forgetting: float = 0.98,
        outlier_ratio: float = 4.0,
    ) -> None:
        if not (math.isfinite(prior_fixed_s) and prior_fixed_s >= 0):
            raise ConfigError(f"prior_fixed_s must be a finite number >= 0, got {prior_fixed_s!r}")
        if not (math.isfinite(prior_per_item_s) and prior_per_item_s > 0):
            raise ConfigError(f"prior_per_item_s must be a finite number > 0, got {prior_per_item_s!r}")
        if not (0.0 < forgetting <= 1.0):
            raise ConfigError(f"forgetting must lie in (0, 1], got {forgetting!r}")
        if not (math.isfinite(outlier_ratio) and outlier_ratio > 1.0):
            raise ConfigError(f"outlier_ratio must be a finite number > 1, got {outlier_ratio!r}")
        self.prior_fixed_s = float(prior_fixed_s)
        self.prior_per_item_s = float(prior_per_item_s)
        self.forgetting = float(forgetting)
        self.outlier_ratio = float(outlier_ratio)
        # Floor for c: types.InferenceCost / TrainingCost need a per-item cost > 0.
        self._min_per_item_s = self.prior_per_item_s * 1e-3
        self.reset()

    def reset(self) -> None:
        """Forget every observation; the estimates return to the prior."""
        self._weight = 0.0  # sum of weights
        self._mean_b = 0.0
        self._mean_t = 0.0
        self._cov_bb = 0.0  # weighted co-moments (sums of products of deviations)
        self._cov_bt = 0.0
        self._first_items = 0
        self._two_sizes = False
        self._count = 0
        self._fixed_s = self.prior_fixed_s
        self._per_item_s = self.prior_per_item_s
        self._fitted = False

    def observe(self, items: int, duration_s: float) -> None:
        """Fold in one finished work item of `items` requests/samples that took `duration_s`."""
        if not (items >= 1 and duration_s >= 0 and math.isfinite(duration_s) and math.isfinite(items)):
            return
        b = float(items)
        t = self._clip(b, float(duration_s))
        self._count += 1
        if self._first_items == 0:
            self._first_items = items
        elif items != self._first_items:
            self._two_sizes = True

        lam = self.forgetting
        self._weight = lam * self._weight + 1.0
        db = b - self._mean_b
        self._mean_b += db / self._weight
        self._mean_t += (t - self._mean_t) / self._weight
        self._cov_bb = lam * self._cov_bb + db * (b - self._mean_b)
        self._cov_bt = lam * self._cov_bt + db * (t - self._mean_t)
        self._refit()

    def _clip(self, b: float, t: float) -> float:
        """Cap a duration at outlier_ratio times the current prediction for its batch size.

        Only long durations are capped: a stall can be arbitrarily long, while a too-short
        reading can pull the estimates down by at most one typical duration's share.
        """
        if self._count == 0:
            predicted = self.prior_fixed_s + self.prior_per_item_s * b
        elif self._fitted:
            predicted = self._fixed_s + self._per_item_s * b
        else:
            # One batch size so far: the prior's shape with its level matched to what was seen.
            # A true line (a, c >= 0) can differ from that shape by at most max(b/m, m/b).
            m = self._mean_b
            prior_m = self.prior_fixed_s + self.prior_per_item_s * m
            prior_b = self.prior_fixed_s + self.prior_per_item_s * b
            predicted = prior_b * (self._mean_t / prior_m) * max(b / m, m / b)
        if predicted <= 0:
            return t
        cap = predicted * self.outlier_ratio
        return cap if t > cap else t

    def _refit(self) -> None:
        if not self._two_sizes or self._cov_bb < self._MIN_VARIANCE_ITEMS2 * self._weight:
            return  # keep the last good fit (or the prior)
        c = self._cov_bt / self._cov_bb
        if c < self._min_per_item_s:
            c = self._min_per_item_s
        a = self._mean_t - c * self._mean_b
        if a < 0:
            # Best fit through the origin: c = sum(w b t) / sum(w b^2) from the raw moments.
            w = self._weight
            sum_bt = self._cov_bt + w * self._mean_b * self._mean_t
            sum_bb = self._cov_bb + w * self._mean_b * self._mean_b
            a = 0.0
            c = max(sum_bt / sum_bb, self._min_per_item_s)
        self._fixed_s = a
        self._per_item_s = c
        self._fitted = True

    @property
    def fixed_s(self) -> float:
        """The fixed cost a per work item (the prior until the fit is identifiable)."""
        return self._fixed_s

    @property
    def per_item_s(self) -> float:
        """The cost c per item (the prior until the fit is identifiable)."""
        return self._per_item_s

    @property
    def fitted(self) -> bool:
        """Whether the estimates come from observations rather than the prior."""
        return self._fitted

    @property
    def observations(self) -> int:
        """How many observations were folded in (ignored ones excluded)."""
        return self._count

    def predict_s(self, items: int) -> float:
        """The estimated duration of a work item of `items` items."""
        return self._fixed_s + self._per_item_s * items
