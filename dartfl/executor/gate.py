"""The executor's rule for enforcing an Allocation on one time-shared compute resource.

`DeviceExecutor` asks `ShareGate` whenever the resource falls free, for the simulator and the
real agent alike, so both make the same choice from the same state:
- if requests wait and training may run, inference gets its share x: each training step
  earns inference x / (1 - x) of its length (x = 1 is strict priority);
- the most urgent task (earliest deadline among queue heads) is served first;
- idle inference time is not banked: it went to training (work conservation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["ShareGate", "most_urgent"]


class ShareGate:
    """Inference credit: seconds inference may still run while training waits."""

    __slots__ = ("credit_s",)

    def __init__(self) -> None:
        self.credit_s = 0.0

    def should_serve(self, backlog: int, share: float, training_open: bool) -> bool:
        """Serve inference next (True) or train (False), given the current backlog."""
        if backlog == 0:
            self.credit_s = 0.0
            return False
        return not training_open or share >= 1.0 or self.credit_s > 0.0

    def served(self, duration_s: float) -> None:
        self.credit_s -= duration_s

    def trained(self, duration_s: float, share: float) -> None:
        if share < 1.0:
            self.credit_s = max(0.0, self.credit_s) + duration_s * share / (1.0 - share)


def most_urgent(head_deadlines_s: Sequence[float]) -> int:
    """Index of the earliest deadline among queue heads (inf for an empty queue); -1 if none."""
    best, best_deadline = -1, math.inf
    for k, deadline in enumerate(head_deadlines_s):
        if deadline < best_deadline:
            best, best_deadline = k, deadline
    return best
