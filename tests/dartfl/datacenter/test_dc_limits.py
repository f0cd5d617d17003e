"""The simulator's last resorts: a run in which no group can ever start ends at once with the
stall error, under the colocated `sync` path as under the split one (the CLI refuses such
inputs first, dartfl.datacenter.engine.check_fits)."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.datacenter import DcConfig, LogNormalLengths, make_dc_policy, model_spec, simulate
from dartfl.errors import DartflError


@pytest.mark.parametrize("policy", ["sync", "static:0.1"])
def test_a_group_no_engine_set_can_hold_stalls_instead_of_ticking_for_ever(policy: str) -> None:
    # sync ticked one simulated second at a time for ever: its rollout loop had no guard.
    cfg = DcConfig(gpus=8, model=model_spec("7b"), steps=3, group_size=3000, batch_groups=8)
    with pytest.raises(
        DartflError, match=rf"^{policy}: the run stalled at t=\d+ s \(no progress possible: no group"
    ):
        simulate(cfg, make_dc_policy(policy), LogNormalLengths(), np.random.default_rng(1))
