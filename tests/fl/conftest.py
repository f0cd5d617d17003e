"""The fault tests' deployment: two devices, three short rounds, one fault (`deploy_local`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestration.deploy_local import DeployFaults, deploy_local

FaultyDeploy = Callable[[DeployFaults, float], dict[str, Any]]


@pytest.fixture
def faulty_deploy(tmp_path: Path) -> FaultyDeploy:
    """`deploy(faults, timeout_s)`: a loopback deployment in tmp_path of 2 devices and 3 rounds
    of 2 s (any node may train a round alone) under `faults`; returns deploy_local's summary."""

    def deploy(faults: DeployFaults, timeout_s: float) -> dict[str, Any]:
        return deploy_local(
            tmp_path,
            clients=2,
            rounds=3,
            round_s=2.0,
            rate_per_s=5.0,
            max_train=300,
            run_config={"max-test-per-task": 100, "min-train-nodes": 1},
            timeout_s=timeout_s,
            faults=faults,
        )

    return deploy
