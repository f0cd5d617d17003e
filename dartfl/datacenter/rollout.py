"""The rollout engines as one pool of decode slots, advanced on a virtual token clock.

Continuous batching gives every active sequence one token per decode step, so all of them
advance together: V(t), the tokens any active sequence has decoded since the start, is one
clock for the whole pool. A sequence admitted at V0 with prefill p and length L finishes
when V reaches V0 + p + L, known at admission. Finish points go into a ring of bins over V
(width `bin_tokens`), so advancing the clock by dV finishes whole bins in O(dV / bin) and
the cost of a run does not grow with the number of samples. Groups (a prompt's n samples)
are binned by their last sample's finish, per policy version, with their response tokens.

The speed of the clock (tokens per second per sequence) is the simulator's business: it
depends on the engines' decode-step time at the current concurrency.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["RolloutPool"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class RolloutPool:
    def __init__(self, max_finish_tokens: int, bin_tokens: int = 8) -> None:
        self.bin_tokens = bin_tokens
        self.nbins = max_finish_tokens // bin_tokens + 4
        self.clock = 0.0  # V, tokens
        self._head = 0  # first bin not yet finished
        self._samples = np.zeros(self.nbins, dtype=np.int64)
        self._groups: dict[int, tuple[IntArray, FloatArray]] = {}  # version -> (count, tokens) rings
        self.inflight_by_version: dict[int, int] = {}
        self.active_samples = 0
        self.inflight_groups = 0
        self.length_biased_tokens = 0.0  # E[L^2]/E[L] of recent admissions: the mean length of
        # a sequence found active at a random time (long ones stay longer)

    def admit(self, lengths: IntArray, version: int, prefill_tokens: int) -> None:
        """Start a cohort of groups (rows of `lengths`) generated with weights `version`."""
        groups, n = lengths.shape
        if groups == 0:
            return
        base = self.clock + prefill_tokens
        finish_bins = np.floor((base + lengths) / self.bin_tokens).astype(np.int64)
        nb = self.nbins
        self._samples += np.bincount(finish_bins.ravel() % nb, minlength=nb)
        last = finish_bins.max(axis=1) % nb
        rings = self._groups.get(version)
        if rings is None:
            rings = self._groups[version] = (np.zeros(nb, dtype=np.int64), np.zeros(nb, dtype=np.float64))
        rings[0][:] += np.bincount(last, minlength=nb)
        rings[1][:] += np.bincount(last, weights=lengths.sum(axis=1).astype(np.float64), minlength=nb)
        self.inflight_by_version[version] = self.inflight_by_version.get(version, 0) + groups
        self.active_samples += groups * n
        self.inflight_groups += groups
        total = float(lengths.sum())
        biased = float(np.square(lengths, dtype=np.float64).sum()) / max(1.0, total)
        w = min(1.0, groups * n / 2048.0)
        self.length_biased_tokens = (
            biased if self.length_biased_tokens == 0 else ((1 - w) * self.length_biased_tokens + w * biased)
        )

    def retag(self, version: int) -> None:
        """Every in-flight group now continues under `version` (interruptible generation)."""
        if not self._groups or list(self._groups) == [version]:
            return
        counts = sum((rings[0] for rings in self._groups.values()), np.zeros(self.nbins, dtype=np.int64))
        tokens = sum((rings[1] for rings in self._groups.values()), np.zeros(self.nbins, dtype=np.float64))
        self._groups = {version: (counts, tokens)}
        self.inflight_by_version = {version: self.inflight_groups}

    def next_finish_tokens(self) -> float:
        """Clock ticks (tokens) until the next bin with a finishing sample closes; inf if none."""
        if self.active_samples == 0:
            return math.inf
        nb = self.nbins
        start = self._head % nb
        order = np.concatenate((self._samples[start:], self._samples[:start]))
        first = int(np.argmax(order > 0))
        return (self._head + first + 1) * self.bin_tokens - self.clock

    def advance(self, tokens: float) -> tuple[int, dict[int, tuple[int, float]]]:
        """Move the clock; return finished samples and, per version, (groups, response tokens)."""
        self.clock += tokens
        new_head = int(self.clock // self.bin_tokens)
        done_groups: dict[int, tuple[int, float]] = {}
        if new_head <= self._head:
            return 0, done_groups
        nb = self.nbins
        span = min(new_head - self._head, nb)
        idx = (self._head + np.arange(span)) % nb
        if span == nb or idx[0] <= idx[-1]:
            sl: slice | IntArray = slice(int(idx[0]), int(idx[-1]) + 1) if span < nb else slice(0, nb)
        else:
            sl = idx
        finished = int(self._samples[sl].sum())
        self._samples[sl] = 0
        for version in list(self._groups):
            counts, group_tokens = self._groups[version]
            g = int(counts[sl].sum())
            if g:
                done_groups[version] = (g, float(group_tokens[sl].sum()))
                counts[sl] = 0
                group_tokens[sl] = 0.0
                left = self.inflight_by_version[version] - g
                if left:
                    self.inflight_by_version[version] = left
                else:
                    del self.inflight_by_version[version]
                    del self._groups[version]
        self._head = new_head
        self.active_samples -= finished
        self.inflight_groups -= sum(g for g, _ in done_groups.values())
        return finished, done_groups
