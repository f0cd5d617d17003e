"""Datacenter mode: the DART allocator balancing rollout and training GPUs in async RL.

The core here is pure (stdlib + numpy): a cost model per model size, response-length
models, the split policies, and an event-driven simulator. The Ray engine lives in
`dartfl.datacenter.ray_engine` and imports Ray and PyTorch only when called.
"""

from dartfl.datacenter.lengths import LengthModel, LogNormalLengths, TraceLengths
from dartfl.datacenter.model import MODEL_SIZES, ModelSpec, model_spec, weight_sync_range_s
from dartfl.datacenter.policies import DC_POLICY_FORMS, DcPolicy, make_dc_policy
from dartfl.datacenter.simulator import DcRun, simulate
from dartfl.datacenter.types import SYNC_MODES, DcAllocation, DcConfig, DcObservation

__all__ = [
    "DC_POLICY_FORMS",
    "MODEL_SIZES",
    "SYNC_MODES",
    "DcAllocation",
    "DcConfig",
    "DcObservation",
    "DcPolicy",
    "DcRun",
    "LengthModel",
    "LogNormalLengths",
    "ModelSpec",
    "TraceLengths",
    "make_dc_policy",
    "model_spec",
    "simulate",
    "weight_sync_range_s",
]
