"""DART's learnt state over a device axis: the surprise envelope, the miss debt, the step risk.

`dartfl.policies.burst.SurpriseEnvelope` and `dartfl.policies.miss_debt.MissDebt` /
`StepRisk` with one row per device, repeating their arithmetic operation for operation (same
order, same float64 rounding) so that `FleetDart` decides exactly as `DartPolicy`. Every
device of a fleet is updated every period with the same period length, so ring positions,
window fill counts and the risk's weighting unit are shared scalars.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dartfl.policies.burst import _RING, SCALE_RATE, WINDOWS
from dartfl.policies.miss_debt import (
    BLAME_PERIODS,
    CAUTION_AT,
    CLASSES,
    CREDIT_S,
    PRIOR_TRAINING_S,
    PROMOTE_STEPS,
    RISK_MEMORY_S,
    LongRunRates,
)

__all__ = ["FleetMissDebt", "FleetStepRisk", "FleetSurprise", "step_class"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def step_class(microbatch: IntArray) -> IntArray:
    """`dartfl.policies.miss_debt.step_class` per device (m >= 1): floor(log2 m), capped."""
    cls = np.zeros(microbatch.shape, dtype=np.int64)
    for j in range(1, CLASSES):
        cls += microbatch >= (1 << j)
    return cls


class FleetSurprise:
    """`SurpriseEnvelope` per device: rows of q, scale and sums; rings of work and forecast."""

    def __init__(self, quantile: float) -> None:
        self.quantile = quantile
        self.eta = 0.0
        self.q = np.zeros((0, 0))

    def set_memory(self, memory_periods: float) -> None:
        if memory_periods <= 0.0:
            self.eta = 0.0
        else:
            self.eta = min(1.0 / (memory_periods * (1.0 - self.quantile)), 1.0 / self.quantile)

    def ensure(self, devices: int) -> None:
        if self.q.shape != (len(WINDOWS), devices):
            self.q = np.zeros((len(WINDOWS), devices))
            self.scale = np.zeros((len(WINDOWS), devices))
            self.sums = np.zeros((len(WINDOWS), devices))
            self.work = np.zeros((_RING, devices))
            self.forecast = np.zeros((_RING, devices))
            self.pos = 0
            self.n = 0

    def update(self, work_s: FloatArray, forecast_rate: FloatArray, period_s: float) -> None:
        pos = self.pos
        self.work[pos] = work_s
        n = self.n + 1 if self.n < _RING else _RING
        up = self.eta * self.quantile
        down = self.eta * (1.0 - self.quantile)
        for j, length in enumerate(WINDOWS):
            start = (pos - length) & (_RING - 1)
            total = self.sums[j] + work_s - self.work[start]
            self.sums[j] = total
            if n <= length:
                continue
            surprise = total - self.forecast[start] * length * period_s
            mean = self.scale[j] + SCALE_RATE * (total - self.scale[j])
            self.scale[j] = mean
            level = self.q[j]
            lowered = level - down * np.where(mean > level, mean, level)
            self.q[j] = np.where(
                surprise > level, level + up * (surprise - level), np.where(lowered > 0.0, lowered, 0.0)
            )
        self.forecast[pos] = forecast_rate
        self.pos = (pos + 1) & (_RING - 1)
        self.n = n

    def surprise_s(self, step_s: FloatArray, period_s: float, weight: FloatArray) -> FloatArray:
        x = step_s / period_s
        result = np.full(x.shape, np.nan)
        lo_len, lo_q = 0.0, np.zeros(x.shape)
        for j, length in enumerate(WINDOWS):
            level = self.q[j] * weight
            hi_q = np.where(level > lo_q, level, lo_q)
            here = np.isnan(result) & (x <= length)
            result = np.where(here, lo_q + (hi_q - lo_q) * (x - lo_len) / (length - lo_len), result)
            lo_len, lo_q = float(length), hi_q
        out: FloatArray = np.where(np.isnan(result), lo_q * x / lo_len, result)
        return out

    def safe_step_s(
        self, room_s: FloatArray, stretch: FloatArray, period_s: float, weight: FloatArray
    ) -> FloatArray:
        result = np.where(room_s <= 0.0, 0.0, np.nan)
        lo_s, lo_q = 0.0, np.zeros(room_s.shape)
        for j, length in enumerate(WINDOWS):
            hi_s = length * period_s
            level = self.q[j] * weight
            hi_q = np.where(level > lo_q, level, lo_q)
            slope = (hi_q - lo_q) / (hi_s - lo_s)
            s = (room_s - lo_q + slope * lo_s) / (stretch + slope)
            here = np.isnan(result) & (s <= hi_s)
            result = np.where(here, np.where(s > lo_s, s, lo_s), result)
            lo_s, lo_q = hi_s, hi_q
        out: FloatArray = np.where(np.isnan(result), room_s / (stretch + lo_q / lo_s), result)
        return out


class FleetMissDebt:
    """`MissDebt` per device."""

    def __init__(self, budget: float, debt: float) -> None:
        self.budget = budget
        self.debt = debt
        self.queue = np.zeros(0)

    def ensure(self, devices: int) -> None:
        if self.queue.shape != (devices,):
            self.queue = np.zeros(devices)
            self.debt_limit = np.zeros(devices)
            self.total = np.zeros(devices)
            self.long_run: LongRunRates[FloatArray] = LongRunRates(np.zeros(devices))

    def update(self, misses: FloatArray, arrivals: FloatArray, work_s: FloatArray, period_s: float) -> None:
        self.long_run.update(arrivals, work_s, period_s)
        self.total = self.total + arrivals
        self.debt_limit = self.debt * np.sqrt(self.total)
        h = self.queue + misses - self.budget * arrivals
        credit = self.budget * self.long_run.rate_per_s * CREDIT_S
        self.queue = np.where(h > -credit, h, -credit)

    def allowance_per_s(self) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            h = self.queue / self.debt_limit
            allowed = self.budget * self.long_run.rate_per_s * np.where(h > 0.0, 1.0 - h, 1.0)
        out: FloatArray = np.where(self.queue >= self.debt_limit, 0.0, allowed)
        return out

    def caution(self) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = self.queue / (CAUTION_AT * self.debt_limit)
        out: FloatArray = np.where(self.queue <= 0.0, 0.0, np.where(share < 1.0, share, 1.0))
        return out

    def price(self) -> FloatArray:
        h = self.queue
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = 1.0 / (1.0 - h / self.debt_limit)
        out: FloatArray = np.where(h <= 0.0, 1.0, np.where(h >= self.debt_limit, math.inf, inside))
        return out


class FleetStepRisk:
    """`StepRisk` per device: per-class sums (devices, CLASSES) in a shared weighting unit."""

    def __init__(self) -> None:
        self.period_s = -1.0
        self.decay = 1.0
        self.misses = np.zeros((0, CLASSES))

    def ensure(self, devices: int) -> None:
        if self.misses.shape != (devices, CLASSES):
            self.misses = np.zeros((devices, CLASSES))
            self.exposure = np.zeros((devices, CLASSES))
            self.steps = np.zeros((devices, CLASSES))
            self.blame_class = np.zeros((BLAME_PERIODS, devices), dtype=np.int64)
            self.blame_exposure = np.zeros((BLAME_PERIODS, devices))
            self.blame_total = np.zeros(devices)
            self.unit = 1.0
            self.pos = 0
            self.round_start_s = math.nan
            self.round_trained = np.zeros(devices)

    def update(
        self,
        misses: FloatArray,
        period_s: float,
        round_start_s: float,
        round_trained: FloatArray,
        microbatch: IntArray,
        step_s: FloatArray,
    ) -> None:
        if period_s != self.period_s:
            self.period_s = period_s
            self.decay = math.exp(-period_s / RISK_MEMORY_S)
        same_round = round_start_s == self.round_start_s
        trained = round_trained - self.round_trained if same_round else round_trained
        self.round_start_s, self.round_trained = round_start_s, round_trained.copy()
        unit = self.unit / self.decay
        if unit > 1e150:
            scale = 1.0 / unit
            self.misses *= scale
            self.exposure *= scale
            self.steps *= scale
            unit = 1.0
        self.unit = unit
        pos = self.pos
        rows = np.arange(misses.shape[0])
        ran = (microbatch > 0) & (trained > 0)
        exposure = np.where(ran, trained * step_s * step_s / np.maximum(microbatch, 1), 0.0)
        self.blame_total = self.blame_total + (exposure - self.blame_exposure[pos])
        self.blame_exposure[pos] = exposure
        cls = step_class(np.maximum(microbatch, 1))
        has = exposure > 0.0
        self.blame_class[pos] = np.where(has, cls, self.blame_class[pos])
        self.exposure[rows, cls] += np.where(has, exposure * unit, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.steps[rows, cls] += np.where(has, trained / microbatch * unit, 0.0)
        self.pos = pos + 1 if pos + 1 < BLAME_PERIODS else 0
        blame = (misses > 0) & (self.blame_total > 0.0)
        if not blame.any():
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            share = misses * unit / self.blame_total
            for i in range(BLAME_PERIODS):  # slot by slot, in the scalar policy's order
                e = self.blame_exposure[i]
                self.misses[rows, self.blame_class[i]] += np.where(blame & (e > 0.0), share * e, 0.0)
        self.steps[blame] = 0.0  # the ladder starts again from the efficient step

    def affordable(
        self,
        microbatch: IntArray,
        a_t: FloatArray,
        c_t: FloatArray,
        allowance_per_s: FloatArray,
        idle: FloatArray,
    ) -> IntArray:
        if not self.misses.any():  # nothing has missed: every class is free
            return microbatch
        efficient = np.clip(np.floor(a_t / c_t + 0.5), 1.0, microbatch.astype(np.float64))
        rows = np.arange(microbatch.shape[0])
        top = step_class(np.maximum(microbatch, 1))
        highest = int(top.max())
        prior = PRIOR_TRAINING_S * (a_t + c_t) * self.unit
        floor = np.zeros(self.misses.shape)
        most = np.zeros(microbatch.shape)
        for j in range(highest + 1):
            k = self.misses[:, j] / (self.exposure[:, j] + prior)
            most = np.where(k > most, k, most)
            floor[:, j] = most
        # The plan fits the budget: no cut, no ladder.
        risky = floor[rows, top] * (a_t + c_t * microbatch) * idle > allowance_per_s
        # The largest open class: the efficient step's, or one above classes that have run.
        opened = step_class(efficient.astype(np.int64))
        enough = PROMOTE_STEPS * self.unit
        run = np.zeros(microbatch.shape)
        found = np.zeros(microbatch.shape, dtype=bool)
        for j in range(CLASSES - 1, 0, -1):
            run = run + self.steps[:, j]
            here = ~found & (run + self.steps[:, j - 1] >= enough)
            opened = np.where(here, np.maximum(opened, j), opened)
            found |= here
        capped = risky & (top > opened)
        m = np.where(capped, np.left_shift(1, opened + 1) - 1, microbatch).astype(np.float64)
        top = np.where(capped, opened, top)
        result = np.where(risky, np.nan, microbatch.astype(np.float64))
        for j in range(highest, -1, -1):
            active = np.isnan(result) & (j <= top)
            kappa = floor[:, j]
            result = np.where(active & (kappa <= 0.0), m, result)
            active &= kappa > 0.0
            with np.errstate(divide="ignore", invalid="ignore"):
                longest_s = allowance_per_s / (kappa * idle)
                fits = np.where(longest_s > a_t, np.trunc((longest_s - a_t) / c_t), 0.0)
            inside = active & (fits >= (1 << j))
            result = np.where(inside, np.where(m < fits, m, fits), result)
            m = np.where(active & ~inside, float((1 << j) - 1), m)
        chosen = np.where(np.isnan(result), 1.0, result)
        out: IntArray = np.where(chosen > efficient, chosen, efficient).astype(np.int64)
        return out
