"""Split a microbatch's samples among tasks so that, over time, counts follow the shares."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SampleSplitter"]


class SampleSplitter:
    """Deterministic largest-remainder split with carry-over.

    Each task accumulates m * y_k of credit; a microbatch hands out whole samples to the
    tasks with the most credit. Over many microbatches task k gets within one sample of its
    share of all samples, even when m * y_k < 1 (a floor share still trains now and then).
    """

    def __init__(self, num_tasks: int) -> None:
        self.credit = [0.0] * num_tasks

    def split(self, samples: int, shares: Sequence[float]) -> list[int]:
        credit = self.credit
        for k, y in enumerate(shares):
            credit[k] += samples * y
        counts = [int(c) if c > 0 else 0 for c in credit]
        left = samples - sum(counts)
        if left > 0:
            order = sorted(range(len(credit)), key=lambda k: credit[k] - counts[k], reverse=True)
            for k in order[:left]:
                counts[k] += 1
        elif left < 0:  # cannot happen with shares summing to 1, but never hand out too many
            for k in sorted(range(len(credit)), key=lambda k: counts[k], reverse=True)[:-left]:
                counts[k] -= 1
        for k, got in enumerate(counts):
            credit[k] -= got
        return counts
