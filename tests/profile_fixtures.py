"""A device profile with fixed, round costs for the simulator, workload and CLI tests.

The built-in profiles are estimates that move when docs/profiles.md is revised; tests whose
expected numbers are worked out by hand from a profile's costs use this one instead.
"""

from __future__ import annotations

from dartfl.types import DeviceProfile, InferenceCost, TrainingCost

SMALL = DeviceProfile(
    name="small",
    inference=InferenceCost(batch_fixed_s=0.005, per_request_s=0.0025),
    max_batch=32,
    training=TrainingCost(microbatch_fixed_s=0.012, per_sample_s=0.007, max_microbatch=32),
)

__all__ = ["SMALL"]
