"""`slack[:margin]`: an example policy plugin (docs/plugins.md).

Strict inference priority, and training steps of one fixed length: the largest step after
which a request that arrived as it started is still answered within its SLO, keeping
`margin` of the SLO in reserve. Unlike `inference-first:m`, the step follows the device's
costs and the tightest SLO instead of a number the user picks; unlike DART, it knows nothing
of arrivals. A researcher's baseline, in forty lines.
"""

from __future__ import annotations

from dartfl.policies.base import EvenSplit
from dartfl.registry import Entry, Knob
from dartfl.types import Allocation, Observation


class SlackPolicy(EvenSplit):
    """The largest training step that still leaves a request arriving at its start in time."""

    def __init__(self, margin: float = 0.1, loss_weighting: str = "uniform") -> None:
        super().__init__(loss_weighting)
        self.margin = margin

    def decide(self, obs: Observation) -> Allocation:
        slo = min(obs.slo_s)
        # A request that arrives as a step starts waits the step, then its batch.
        batch = max(a + c for a, c in zip(obs.batch_fixed_s, obs.per_request_s, strict=True))
        room = (1.0 - self.margin) * slo - batch - obs.microbatch_fixed_s
        step = int(room / obs.per_sample_s) if room > 0 else 0
        return self.allocation(obs, 1.0, min(step, obs.max_microbatch))


def _margin(value: float) -> str | None:
    return None if 0.0 <= value < 1.0 else "must lie in [0, 1)"


# The entry point names this: dartfl reads the spec `slack:0.2` or `slack:margin=0.2` with it.
SLACK = Entry(
    "slack",
    "slack[:margin]",
    "largest step that fits the SLO's slack (example plugin)",
    SlackPolicy,
    (Knob("margin", float, "SLO fraction kept in reserve", _margin),),
    positional=1,
)
