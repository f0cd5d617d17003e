"""DART's promise: the miss-debt virtual queue H, and what each step size has cost.

`MissDebt` keeps H(t+1) = max(H(t) + M(t) - delta A(t), -C(t)): the training-caused misses M
beyond the budget delta of the arrivals A, with unused budget banked down to a credit of
C = delta lambda CREDIT_S. Voluntary training stops while H >= H_max, so on any trace the
training-caused misses are at most delta A + H_max + E, E the misses of steps already under
way when H reached H_max (docs/allocator.md, "The promise"). Banking does not change that
bound: H(T) - H(0) still bounds the misses beyond the budget.

`StepRisk` learns, per class of step size, how many training-caused misses a second of
training in such steps has brought: the knee where steps start to cost (a clump no longer
fits behind a step, a burst onset is hit) is learnt from the device's own history, not
assumed. Within a class the rate is taken to grow with the step length s (a burst that starts
during a step is found half-way through it on average and the work behind it is delayed by up
to s), so the class keeps misses per (training second x step length). Misses are blamed on the
steps of the last few periods, in proportion to their exposure; estimates forget towards a
miss-free prior, so a class that stopped being used is tried again later.

Plain floats and preallocated lists: O(classes + blame window) per period.
"""

from __future__ import annotations

import math
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["CAUTION_AT", "CLASSES", "LongRunRates", "MissDebt", "StepRisk", "efficient_step", "step_class"]

# The long-run arrival rate (the budget's pace) forgets over RATE_MEMORY_S, and is averaged
# over RATE_WARMUP_S at least, so a run that opens with a burst does not start rich.
RATE_MEMORY_S = 600.0
RATE_WARMUP_S = 10.0
# Unused budget is banked up to the budget of this many seconds at the long-run rate, so one
# unforeseeable burst is paid from savings instead of by minutes without training.
CREDIT_S = 600.0

# The plan counts the whole learnt surprise once H reaches this share of H_max, none of it
# while H <= 0 (in credit), and a linear share in between (`MissDebt.caution`).
CAUTION_AT = 0.25

# Step-size classes: m in [2^j, 2^(j+1)), the last open-ended.
CLASSES = 6
# What a class has cost forgets over RISK_MEMORY_S, towards a prior of PRIOR_TRAINING_S
# seconds of training without a miss.
RISK_MEMORY_S = 600.0
PRIOR_TRAINING_S = 5.0
# Misses are blamed on the steps of this many past periods (a step's victims are served, and
# counted, up to a few periods after it).
BLAME_PERIODS = 4
# Once a step has brought a miss (and until the misses are forgotten), a class of steps opens
# only after this many steps of the classes below it or larger have run since the last miss:
# the device relearns the workload's risk from the efficient step up, instead of stepping
# down one untried (so far free) class after another.
PROMOTE_STEPS = 20.0


def efficient_step(a_t: float, c_t: float, microbatch: int) -> int:
    """m* = a_T / c_T rounded half up, in [1, microbatch]: the step that trains the most
    samples per second of step exposure (m / s(m)^2 is largest there)."""
    m = int(a_t / c_t + 0.5)
    return 1 if m < 1 else (microbatch if m > microbatch else m)


def step_class(microbatch: int) -> int:
    """The class of a step of `microbatch` >= 1 samples: floor(log2 m), at most CLASSES - 1."""
    j = microbatch.bit_length() - 1
    return j if j < CLASSES else CLASSES - 1


# One device's floats, or a fleet's arrays with one entry per device.
Num = TypeVar("Num", float, npt.NDArray[np.float64])


class LongRunRates(Generic[Num]):
    """The long-run arrival rate and inference work per second (the budget's pace): sums
    that forget over RATE_MEMORY_S, averaged over RATE_WARMUP_S at least. One device's
    (`MissDebt`) or a fleet's, elementwise in the same order (`FleetMissDebt`)."""

    __slots__ = ("_arrived", "_decay", "_period_s", "_seen_s", "_work_s", "load", "rate_per_s")

    def __init__(self, zero: Num) -> None:
        self._period_s = -1.0
        self._decay = 1.0
        self._arrived: Num = zero  # exponentially weighted sums
        self._work_s: Num = zero
        self._seen_s = 0.0
        self.rate_per_s: Num = zero
        self.load: Num = zero  # the long-run inference work per second

    def update(self, arrivals: Num, work_s: Num, period_s: float) -> None:
        """Fold in one period: `arrivals` requests that need `work_s` device-seconds."""
        if period_s != self._period_s:
            self._period_s = period_s
            self._decay = math.exp(-period_s / RATE_MEMORY_S)
        d = self._decay
        self._arrived = self._arrived * d + arrivals
        self._work_s = self._work_s * d + work_s
        self._seen_s = self._seen_s * d + period_s
        seen = max(self._seen_s, RATE_WARMUP_S)
        self.rate_per_s = self._arrived / seen
        self.load = self._work_s / seen


class MissDebt:
    """H, its credit floor and the long-run arrival rate, updated once per control period."""

    __slots__ = ("_total", "budget", "debt", "debt_limit", "long_run", "queue")

    def __init__(self, budget: float, debt: float) -> None:
        self.budget = budget
        self.debt = debt
        self.reset()

    def reset(self) -> None:
        self.queue = 0.0  # H, requests (negative: banked budget)
        self.debt_limit = 0.0  # H_max = debt sqrt(arrivals so far), requests
        self._total = 0.0  # arrivals so far
        self.long_run: LongRunRates[float] = LongRunRates(0.0)

    def update(self, misses: int, arrivals: int, work_s: float, period_s: float) -> None:
        """Fold in one period: `misses` training-caused misses, `arrivals` requests that need
        `work_s` device-seconds of inference."""
        self.long_run.update(arrivals, work_s, period_s)
        self._total += arrivals
        self.debt_limit = self.debt * math.sqrt(self._total)
        h = self.queue + misses - self.budget * arrivals
        credit = self.budget * self.long_run.rate_per_s * CREDIT_S
        self.queue = h if h > -credit else -credit

    def allowance_per_s(self) -> float:
        """Training-caused misses per second the budget allows now: delta lambda, less what
        repays the debt (1 - H / H_max); 0 at H >= H_max. Banked budget is kept, not spent."""
        if self.queue >= self.debt_limit:
            return 0.0
        h = self.queue / self.debt_limit
        return self.budget * self.long_run.rate_per_s * (1.0 - h if h > 0.0 else 1.0)

    def caution(self) -> float:
        """How much of the learnt surprise a step's plan counts: 0 while H <= 0 (training has
        caused no more misses than the budget so far), rising linearly to 1 at H = CAUTION_AT
        x H_max. The surprise envelope is a high quantile of unforecast work, so planning every
        step against it in full assumes the worst at every step; the debt says whether that
        caution is needed (docs/allocator.md, "Caution from the debt")."""
        h = self.queue
        if h <= 0.0:
            return 0.0
        if h >= CAUTION_AT * self.debt_limit:
            return 1.0
        return h / (CAUTION_AT * self.debt_limit)

    def price(self) -> float:
        """The price of a training-caused miss: 1 / (1 - H / H_max), 1 while in credit, inf at
        H >= H_max (the derivative of the barrier Lyapunov term -H_max ln(1 - H / H_max))."""
        h = self.queue
        if h <= 0.0:
            return 1.0
        if h >= self.debt_limit:
            return math.inf
        return 1.0 / (1.0 - h / self.debt_limit)


class StepRisk:
    """Training-caused misses per second of training per second of step length, per class.

    The exponentially weighted sums are kept in units that grow by 1 / decay each period
    (`_unit`), so forgetting costs O(1) instead of a pass over the classes; they are rescaled
    before the unit overflows.
    """

    __slots__ = (
        "_blame_class",
        "_blame_exposure",
        "_blame_total",
        "_decay",
        "_exposure",
        "_floor",
        "_misses",
        "_period_s",
        "_pos",
        "_round_start_s",
        "_round_trained",
        "_steps",
        "_unit",
    )

    def __init__(self) -> None:
        self._period_s = -1.0
        self._decay = 1.0
        self._misses = [0.0] * CLASSES  # exponentially weighted, per class, in `_unit`s
        self._exposure = [0.0] * CLASSES  # training seconds x step length, weighted alike
        self._steps = [0.0] * CLASSES  # steps run, weighted alike
        self._floor = [0.0] * CLASSES  # scratch for `_kappas`
        self._blame_class = [0] * BLAME_PERIODS
        self._blame_exposure = [0.0] * BLAME_PERIODS
        self.reset()

    def reset(self) -> None:
        for j in range(CLASSES):
            self._misses[j] = self._exposure[j] = self._steps[j] = 0.0
        for i in range(BLAME_PERIODS):
            self._blame_class[i] = 0
            self._blame_exposure[i] = 0.0
        self._blame_total = 0.0
        self._unit = 1.0
        self._pos = 0
        self._round_start_s = math.nan
        self._round_trained = 0

    def update(
        self,
        misses: int,
        period_s: float,
        round_start_s: float,
        round_trained: int,
        microbatch: int,
        step_s: float,
    ) -> None:
        """Fold in one period: `misses` training-caused misses were counted; the round's
        progress tells how many samples were trained, in steps of `microbatch` samples and
        `step_s` seconds (the last decision)."""
        if period_s != self._period_s:
            self._period_s = period_s
            self._decay = math.exp(-period_s / RISK_MEMORY_S)
        same_round = round_start_s == self._round_start_s
        trained = round_trained - self._round_trained if same_round else round_trained
        self._round_start_s, self._round_trained = round_start_s, round_trained
        unit = self._unit / self._decay
        if unit > 1e150:  # rescale everything to unit 1
            scale = 1.0 / unit
            for j in range(CLASSES):
                self._misses[j] *= scale
                self._exposure[j] *= scale
                self._steps[j] *= scale
            unit = 1.0
        self._unit = unit
        # This period's exposure joins its class and the blame window.
        pos = self._pos
        exposure = trained * step_s * step_s / microbatch if microbatch > 0 and trained > 0 else 0.0
        self._blame_total += exposure - self._blame_exposure[pos]
        self._blame_exposure[pos] = exposure
        if exposure > 0.0:
            cls = step_class(microbatch)
            self._blame_class[pos] = cls
            self._exposure[cls] += exposure * unit
            self._steps[cls] += trained / microbatch * unit
        self._pos = pos + 1 if pos + 1 < BLAME_PERIODS else 0
        if misses > 0 and self._blame_total > 0.0:
            share = misses * unit / self._blame_total
            for i in range(BLAME_PERIODS):
                e = self._blame_exposure[i]
                if e > 0.0:
                    self._misses[self._blame_class[i]] += share * e
            for j in range(CLASSES):  # the ladder starts again from the efficient step
                self._steps[j] = 0.0

    def kappa(self, cls: int, prior_step_s: float) -> float:
        """Misses per (training second x second of step) of class `cls`: see `_kappas`."""
        self._kappas(cls, prior_step_s)
        return self._floor[cls]

    def _kappas(self, cls: int, prior_step_s: float) -> None:
        """Fill `_floor[0..cls]` with each class's rate, at least that of any smaller class: a
        larger class never costs less per second of step, so a miss in a small class also
        warns off the larger ones nobody has tried yet. The prior is PRIOR_TRAINING_S seconds
        of training in steps of `prior_step_s` without a miss."""
        prior = PRIOR_TRAINING_S * prior_step_s * self._unit
        misses, exposure, floor = self._misses, self._exposure, self._floor
        most = 0.0
        for j in range(cls + 1):
            k = misses[j] / (exposure[j] + prior)
            if k > most:
                most = k
            floor[j] = most

    def affordable(self, microbatch: int, a_t: float, c_t: float, allowance_per_s: float, idle: float) -> int:
        """The largest m' <= microbatch whose class's learnt miss rate fits the allowance.

        Training a fraction `idle` of the time in steps of s costs kappa_j s idle misses per
        second; within a class that grows with s, so each class is solved in closed form,
        largest first. Never below the efficient step m* = a_T / c_T (rounded, at most the
        plan's): samples per unforeseen miss go as m / s(m)^2, largest at m*, so below it a
        smaller step costs more misses per sample. While H < H_max that step still runs when
        it does not fit; fewer steps then follow from H reaching H_max.
        """
        efficient = efficient_step(a_t, c_t, microbatch)
        top = step_class(microbatch)
        self._kappas(top, a_t + c_t)
        kappa = self._floor[top]
        if kappa * (a_t + c_t * microbatch) * idle <= allowance_per_s:
            return microbatch  # the plan fits the budget: no cut, no ladder
        # The largest open class: the efficient step's, or one above classes that have run.
        opened = step_class(efficient)
        enough = PROMOTE_STEPS * self._unit
        run = 0.0
        for j in range(CLASSES - 1, 0, -1):
            run += self._steps[j]
            if run + self._steps[j - 1] >= enough:
                opened = j if j > opened else opened
                break
        if top > opened:
            microbatch = (1 << (opened + 1)) - 1
            top = opened
        m = microbatch
        for j in range(top, -1, -1):
            kappa = self._floor[j]
            if kappa <= 0.0:
                break
            longest_s = allowance_per_s / (kappa * idle)
            fits = int((longest_s - a_t) / c_t) if longest_s > a_t else 0
            if fits >= 1 << j:  # fits inside this class
                m = m if m < fits else fits
                break
            m = (1 << j) - 1  # try the class below, from its largest step
        else:
            m = 1
        return m if m > efficient else efficient
