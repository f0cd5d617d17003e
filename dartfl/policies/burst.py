"""What can arrive within a training step beyond what the recent rate predicts: a learned envelope.

DART plans a step of length s against the inference work that arrives during it. The fast
estimate (the recent per-period counts, docs/allocator.md step 1) sees a burst once it has
begun; what it cannot see is the work that shows up *unannounced*: a clump after a quiet
minute, the onset of an ON period. `SurpriseEnvelope` learns that from the device's own
history. Every period it compares the work that arrived in the last L periods, for
L in WINDOWS, with what the fast estimate had forecast at the start of those L periods, and
tracks a high level of the excess (the *surprise*) per window length, a stochastic-
approximation quantile that learns large surprises at once: a surprise above the level lifts
it by `eta * p` of the gap, and every other window lowers it by `eta * (1 - p)` of the mean
work per window or of the level itself, whichever is larger. It settles where at most a
fraction 1 - p of windows exceed it (fewer when surprises are large against the mean: then it
behaves like a slowly decaying maximum), and without exceedances it decays by a factor e in
`memory_periods`. `surprise_s(s)` interpolates the
levels linearly in the step length s.

Plain floats and preallocated lists: one update costs O(len(WINDOWS)) and allocates nothing.
"""

from __future__ import annotations

__all__ = ["WINDOWS", "SurpriseEnvelope"]

# Window lengths in control periods. A step longer than the longest window is planned against
# the longest window's surprise scaled by its length.
WINDOWS = (1, 2, 4, 8)
_RING = 16  # a power of two above max(WINDOWS)
_MASK = _RING - 1
SCALE_RATE = 0.01  # the mean work per window forgets in about 100 periods


class SurpriseEnvelope:
    """Per window length: the p-quantile of (work that arrived) - (work the fast estimate forecast)."""

    __slots__ = ("_eta", "_forecast", "_n", "_pos", "_quantile", "_scale", "_sums", "_work", "q")

    def __init__(self, quantile: float, memory_periods: float) -> None:
        self._quantile = quantile
        self._eta = 0.0
        self.set_memory(memory_periods)
        self.q = [0.0] * len(WINDOWS)  # surprise quantile per window, device-seconds of work
        self._scale = [0.0] * len(WINDOWS)  # mean work per window: the step of the tracker
        self._sums = [0.0] * len(WINDOWS)  # work arrived in the last L periods
        self._work = [0.0] * _RING  # per-period work, a ring
        self._forecast = [0.0] * _RING  # the forecast work rate made at each period's start
        self._pos = 0
        self._n = 0  # periods seen, up to _RING

    def set_memory(self, memory_periods: float) -> None:
        """Without an exceedance a level decays by e in `memory_periods` periods (eta (1 - p)
        of it per period); 0 periods: remember nothing."""
        if memory_periods <= 0.0:
            self._eta = 0.0
        else:  # an up-step never overshoots the surprise: eta * p <= 1
            self._eta = min(1.0 / (memory_periods * (1.0 - self._quantile)), 1.0 / self._quantile)

    def reset(self) -> None:
        for j in range(len(WINDOWS)):
            self.q[j] = self._scale[j] = self._sums[j] = 0.0
        for i in range(_RING):
            self._work[i] = self._forecast[i] = 0.0
        self._pos = self._n = 0

    def update(self, work_s: float, forecast_rate: float, period_s: float) -> None:
        """Fold in one period: `work_s` device-seconds of inference arrived in it, and the
        work rate (device-seconds per second) the fast estimate now forecasts from here on."""
        pos = self._pos
        work, forecast, sums, q, scale = self._work, self._forecast, self._sums, self.q, self._scale
        work[pos] = work_s
        n = self._n + 1 if self._n < _RING else _RING
        up = self._eta * self._quantile
        down = self._eta * (1.0 - self._quantile)
        for j in range(len(WINDOWS)):
            length = WINDOWS[j]
            start = (pos - length) & _MASK
            total = sums[j] + work_s - work[start]
            sums[j] = total
            if n <= length:  # the window is not full yet
                continue
            # The surprise: what arrived beyond the forecast made when this window began.
            surprise = total - forecast[start] * length * period_s
            mean = scale[j] + SCALE_RATE * (total - scale[j])
            scale[j] = mean
            level = q[j]
            if surprise > level:
                q[j] = level + up * (surprise - level)
            else:
                # Down by a fraction of the level or of the mean window, whichever is larger:
                # a level learnt in a burst is forgotten in a quiet spell, whose mean is tiny.
                level -= down * (mean if mean > level else level)
                q[j] = level if level > 0.0 else 0.0
        forecast[pos] = forecast_rate
        self._pos = (pos + 1) & _MASK
        self._n = n

    def surprise_s(self, step_s: float, period_s: float, weight: float = 1.0) -> float:
        """The surprise work to plan for during a step of `step_s` seconds (piecewise linear),
        `weight` times the learnt levels (DART's caution, `MissDebt.caution`)."""
        x = step_s / period_s
        q = self.q
        lo_len, lo_q = 0.0, 0.0
        for j, length in enumerate(WINDOWS):
            level = q[j] * weight
            hi_q = level if level > lo_q else lo_q  # longer windows never plan for less
            if x <= length:
                return lo_q + (hi_q - lo_q) * (x - lo_len) / (length - lo_len)
            lo_len, lo_q = float(length), hi_q
        return lo_q * x / lo_len

    def safe_step_s(self, room_s: float, stretch: float, period_s: float, weight: float = 1.0) -> float:
        """The longest s with s * stretch + surprise_s(s, weight) <= room_s (0 if none).

        The left side is increasing and piecewise linear in s, so each segment is solved in
        closed form, shortest first.
        """
        if room_s <= 0.0:
            return 0.0
        q = self.q
        lo_s, lo_q = 0.0, 0.0
        for j, length in enumerate(WINDOWS):
            hi_s = length * period_s
            level = q[j] * weight
            hi_q = level if level > lo_q else lo_q
            slope = (hi_q - lo_q) / (hi_s - lo_s)
            # On [lo_s, hi_s]: s * stretch + lo_q + slope * (s - lo_s) <= room_s.
            s = (room_s - lo_q + slope * lo_s) / (stretch + slope)
            if s <= hi_s:
                return s if s > lo_s else lo_s
            lo_s, lo_q = hi_s, hi_q
        return room_s / (stretch + lo_q / lo_s)
