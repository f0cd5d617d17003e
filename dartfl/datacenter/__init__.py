"""Datacenter mode: the DART allocator balancing rollout and training GPUs in async RL.

The core here is pure (stdlib + numpy): a cost model per model size, response-length and
agentic-episode models, the split policies (with verl-dynamic, a lending rival), an
event-driven simulator, and the split decision the Ray engine uses (`worker_split`). The Ray
engine itself is the top-level adapter package `ray_engine`.
"""

from dartfl.datacenter.lengths import LengthModel, LogNormalLengths, TraceLengths
from dartfl.datacenter.model import MODEL_SIZES, ModelSpec, model_spec, weight_sync_range_s
from dartfl.datacenter.policies import DC_POLICY_FORMS, DcPolicy, make_dc_policy
from dartfl.datacenter.simulator import DcRun, simulate
from dartfl.datacenter.types import SYNC_MODES, DcAllocation, DcConfig, DcObservation
from dartfl.datacenter.workload import WORKLOADS, AgenticWorkload, Workload

__all__ = [
    "DC_POLICY_FORMS",
    "MODEL_SIZES",
    "SYNC_MODES",
    "WORKLOADS",
    "AgenticWorkload",
    "DcAllocation",
    "DcConfig",
    "DcObservation",
    "DcPolicy",
    "DcRun",
    "LengthModel",
    "LogNormalLengths",
    "ModelSpec",
    "TraceLengths",
    "Workload",
    "make_dc_policy",
    "model_spec",
    "simulate",
    "weight_sync_range_s",
]
