"""The work items the executor hands to its driver: an inference batch, a training step, or
a change of a lane's cores.

The driver runs the item (the simulator by advancing its clock, the agent on ONNX Runtime or
PyTorch, or by resizing a thread pool) and hands it back with its duration, to
`DeviceExecutor.batch_done`, `step_done` or `switch_done`. Every item names the lane it runs
on and how many cores that lane holds, so a driver with one thread per lane knows where to
run it and with how many threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["INFERENCE_LANE", "LANES", "TRAINING_LANE", "CoreSwitch", "InferenceBatch", "Lane", "TrainingStep"]

R = TypeVar("R")
# The serving lane holds the inference cores and time-shares them with training steps (the
# whole device when it is not split); the training lane holds the other cores (none when
# time-shared) and only trains.
Lane = Literal["inference", "training"]
INFERENCE_LANE: Lane = "inference"
TRAINING_LANE: Lane = "training"
LANES: tuple[Lane, Lane] = (INFERENCE_LANE, TRAINING_LANE)


@dataclass(frozen=True, slots=True)
class InferenceBatch(Generic[R]):
    """Requests of one task taken from its queue, oldest first, with their arrival times.

    `training_delay_s` is the training time of their busy period so far and `delay_cause_s`
    when its latest step started (NaN: none); see dartfl.attribution."""

    task: int
    requests: list[R]
    arrivals_s: list[float]
    started_s: float
    cores: int = 1  # the serving lane's cores: run the batch with this many threads
    training_delay_s: float = 0.0
    delay_cause_s: float = math.nan
    split_delay_s: float = 0.0  # the part of `training_delay_s` a core split added


@dataclass(frozen=True, slots=True)
class TrainingStep:
    """One non-preemptible training microbatch of `samples`, under the allocation it started with."""

    samples: int
    task_shares: tuple[float, ...]
    loss_weights: tuple[float, ...]
    inference_share: float
    started_s: float
    lane: Lane = INFERENCE_LANE
    cores: int = 1  # the lane's cores: train with this many threads


@dataclass(frozen=True, slots=True)
class CoreSwitch:
    """`lane` changes from `cores_from` to `cores_to` cores before its next item: the driver
    resizes the lane's thread pool (the simulator waits the profile's switch time)."""

    lane: Lane
    cores_from: int
    cores_to: int
    started_s: float
