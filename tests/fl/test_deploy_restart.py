"""Issue 4, end to end: the server of a real loopback deployment (SuperLink, 2 SuperNodes,
2 device agents, Mosquitto, as `deploy_local` builds it) is killed mid-run and started again
with the same checkpoint-dir; the run resumes at the round after the last checkpoint.

`deploy_local(faults=DeployFaults(kill_server_after_round=1))` SIGKILLs the whole server side
(the SuperLink with its SuperExec and ServerApp, and `flwr run`) once round 1's checkpoint is
written and an agent trains round 2, waits for the agents to finish that orphaned round,
starts the SuperLink again from its database on the same address, and runs `flwr run` again;
the SuperNodes reconnect on their own. Run under `scripts/loopback-run`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestration.deploy_local import DeployFaults
from orchestration.faults import processes_of
from tests.process_fixtures import alive

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _loopback_only() -> bool:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines) == ["lo"]


@pytest.mark.skipif(not _loopback_only(), reason="run the Flower tests under scripts/loopback-run")
def test_a_killed_server_resumes_from_its_last_checkpoint(
    tmp_path: Path, faulty_deploy: Callable[[DeployFaults, float], dict[str, Any]]
) -> None:
    ckpt_dir = tmp_path / "checkpoints"
    out: dict[str, Any] = {}
    try:
        out = faulty_deploy(DeployFaults(kill_server_after_round=1), 150.0)
        killed_log = (tmp_path / "flwr-run-killed.log").read_text()
        resumed_log = (tmp_path / "flwr-run.log").read_text()
        assert out["rounds"] == 3
        assert [r["round"] for r in out["per_round"]] == [1, 2, 3]
        # The killed run got past round 1's checkpoint and not beyond round 2.
        assert sorted(p.name for p in ckpt_dir.glob("round-*.json")) == [
            "round-0001.json", "round-0002.json", "round-0003.json",
        ]  # fmt: skip
        assert "resuming" not in killed_log
        # The SuperLink itself died and came back (twice started, one log).
        assert (tmp_path / "superlink.log").read_text().count("Starting Flower SuperLink") == 2
        # The new run resumed from round 1's checkpoint and did not recompute round 1: the
        # final history's round 1 is the one the killed run checkpointed, byte for byte.
        assert "resuming from the checkpoint of round 1" in resumed_log
        ckpt1 = json.loads((ckpt_dir / "round-0001.json").read_text())
        ckpt3 = json.loads((ckpt_dir / "round-0003.json").read_text())
        assert ckpt3["history"][0] == ckpt1["history"][0]
        assert [h["round"] for h in ckpt3["history"]] == [1, 2, 3]
        assert (ckpt_dir / "round-0001.json").stat().st_mtime < (ckpt_dir / "round-0002.json").stat().st_mtime
        result = json.loads((tmp_path / "result.json").read_text())
        assert result["history"][0] == ckpt1["history"][0]
        assert [h["replies"] for h in result["history"][1:]] == [2, 2]  # both nodes after the restart
    finally:
        # Nothing may be left: agents, SuperNodes, and every Flower process of this deployment
        # (SuperLink, SuperExec, the killed and the new ServerApp, flwr run). Kill what is.
        pids = [int(p) for p in out.get("pids", [])]
        left = _left(pids, tmp_path / "flwr-home")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes left: {left}"


def _left(pids: list[int], flwr_home: Path, wait_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        left = [p for p in pids if alive(p)] + processes_of(flwr_home)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.3)
