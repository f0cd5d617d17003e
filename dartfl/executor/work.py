"""The work items the executor hands to its driver: an inference batch or a training step.

The driver runs the item (the simulator by advancing its clock, the agent on ONNX Runtime or
PyTorch) and hands it back with its duration, to `DeviceExecutor.batch_done` or `step_done`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["InferenceBatch", "TrainingStep"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class InferenceBatch(Generic[R]):
    """Requests of one task taken from its queue, oldest first, with their arrival times.

    `training_delay_s` is the training time of their busy period so far and `delay_cause_s`
    when its latest step started (NaN: none); see dartfl.attribution."""

    task: int
    requests: list[R]
    arrivals_s: list[float]
    started_s: float
    training_delay_s: float = 0.0
    delay_cause_s: float = math.nan


@dataclass(frozen=True, slots=True)
class TrainingStep:
    """One non-preemptible training microbatch of `samples`, under the allocation it started with."""

    samples: int
    task_shares: tuple[float, ...]
    loss_weights: tuple[float, ...]
    inference_share: float
    started_s: float
