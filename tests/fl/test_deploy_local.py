"""A real Flower deployment on loopback, end to end: SuperLink, 2 SuperNodes, 2 device agents
with their round channels, Mosquitto and a replay, 2 rounds (`dartfl fl deploy-local`).

Run under `scripts/loopback-run` like the simulation test. `deploy_local` stops every process
it started in `finally`, so a failing run leaves nothing behind either; the test checks that.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from orchestration.deploy_local import deploy_local
from tests.process_fixtures import in_session_or_group

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _loopback_only() -> bool:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines) == ["lo"]


@pytest.mark.skipif(not _loopback_only(), reason="run the Flower tests under scripts/loopback-run")
def test_two_devices_two_rounds_through_flower(tmp_path: Path) -> None:
    out = deploy_local(
        tmp_path,
        clients=2,
        rounds=2,
        round_s=3.0,
        rate_per_s=15.0,
        max_train=400,
        run_config={"max-test-per-task": 200},
        timeout_s=240.0,
    )
    assert out["rounds"] == 2
    assert [r["replies"] for r in out["per_round"]] == [2, 2]  # both devices contributed every round
    for r in out["per_round"]:
        assert r["slowest_client_s"] >= 3.0  # the agent trained through the round's deadline
        assert r["server_round_s"] > r["slowest_client_s"]
        assert r["overhead_s"] == pytest.approx(r["server_round_s"] - r["slowest_client_s"])
    assert out["samples_trained"] > 0
    assert 0.0 < out["harvest_efficiency"] <= 1.0 + 1e-9
    assert 0.0 <= out["slo_attainment"] <= 1.0
    assert set(out["replay"]) == {"fl-edge-0", "fl-edge-1"}
    for load in out["replay"].values():
        assert load["sent"] > 0 and load["ok"] > 0.9 * load["sent"]
    assert len(out["pids"]) == 4  # 2 agents + 2 SuperNodes (+ the SuperLink and the broker)
    deadline = time.monotonic() + 10
    left = [p for pid in out["pids"] for p in in_session_or_group(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = [p for pid in out["pids"] for p in in_session_or_group(pid)]
    assert left == [], f"processes left: {left}"
    for pid in out["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
