"""A real Flower simulation (SuperLink + Ray) of 2 clients x 2 rounds, end to end.

Ray must not reach the network: run it under `scripts/loopback-run` (make test does). The
test checks that its own SuperLink and everything under it are gone afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dartfl.store import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _loopback_only() -> bool:
    # /proc/net/dev lists this network namespace's interfaces (/sys may show the host's).
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines) == ["lo"]


def _flower_pids() -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True).stdout
    pids = set()
    for line in out.splitlines()[1:]:
        pid, stat, args = line.split(None, 2)
        if "Z" not in stat and any(
            n in args for n in ("flower-superlink", "flwr-simulation", "raylet", "gcs_server")
        ):
            pids.add(int(pid))
    return pids


@pytest.mark.skipif(not _loopback_only(), reason="Ray needs a loopback-only namespace: scripts/loopback-run")
def test_two_clients_two_rounds_end_to_end(tmp_path: Path) -> None:
    before = _flower_pids()
    store = tmp_path / "runs.sqlite"
    cmd = [
        sys.executable, "-m", "dartfl.cli.main", "fl", "sim", "--clients", "2", "--rounds", "2",
        "--policy", "dart", "--policy", "inference-first", "--seed", "3", "--json", "--store", str(store),
        "--set", "max-train-per-task=400", "--set", "max-test-per-task=200", "--set", "favourite-tasks=",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)["results"]
    assert [r["policy"] for r in results] == ["dart", "inference-first"]
    assert [r["loss_weighting"] for r in results] == ["demand", "uniform"]
    for r in results:
        assert r["rounds"] == 2
        assert [h["replies"] for h in r["history"]] == [2, 2]
        for key in ("mean_accuracy", "demand_weighted_accuracy", "slo_attainment", "harvest_efficiency"):
            assert 0.0 <= r[key] <= 1.5
        assert set(r["accuracy_per_task"]) == {"digits", "fashion", "uci-digits"}
    # Each policy's result names its run in the store, which holds that summary.
    with RunStore(store, read_only=True) as runs:
        for r in results:
            stored = runs.results(r["run_id"])[r["policy"]]
            assert stored["demand_weighted_accuracy"] == r["demand_weighted_accuracy"]
    assert results[0]["run_id"] != results[1]["run_id"]
    deadline = time.monotonic() + 15  # killed processes may take a moment to exit
    while not _flower_pids() <= before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _flower_pids() <= before  # the SuperLink, simulation and Ray are all gone
