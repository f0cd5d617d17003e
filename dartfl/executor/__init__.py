"""The one device executor, shared by the simulator and the real agent.

`DeviceExecutor` holds what both kinds of device must account identically: the per-task
queues, the counts of a control period, the rate estimates, the FL round, the Observation the
policy sees, and the rule that picks the next work item (`ShareGate`, most urgent task
first). Time is always passed in: the simulator drives it from its event clock, the agent
from the monotonic clock, and each runs the work items the executor hands out. A device of
several cores can be split into a serving lane and a training lane that run concurrently
(`CoreLanes`); the driver then runs one loop per lane.
"""

from dartfl.executor.costs import CostModel, ProfiledCosts, StaticCosts, split_costs
from dartfl.executor.device import Admission, DeviceExecutor, ExecutorConfig
from dartfl.executor.gate import ShareGate, most_urgent
from dartfl.executor.lanes import CoreLanes
from dartfl.executor.rounds import ROUND_TOLERANCE_S, RoundClock, next_round_end, rounds_ended_by
from dartfl.executor.split import SampleSplitter
from dartfl.executor.work import (
    INFERENCE_LANE,
    LANES,
    TRAINING_LANE,
    CoreSwitch,
    InferenceBatch,
    Lane,
    TrainingStep,
)

__all__ = [
    "INFERENCE_LANE",
    "LANES",
    "ROUND_TOLERANCE_S",
    "TRAINING_LANE",
    "Admission",
    "CoreLanes",
    "CoreSwitch",
    "CostModel",
    "DeviceExecutor",
    "ExecutorConfig",
    "InferenceBatch",
    "Lane",
    "ProfiledCosts",
    "RoundClock",
    "SampleSplitter",
    "ShareGate",
    "StaticCosts",
    "TrainingStep",
    "most_urgent",
    "next_round_end",
    "rounds_ended_by",
    "split_costs",
]
