"""Every datacenter policy under every weight-sync mode on every workload preset: each run
ends, with every step trained and no sample past its bound. verl-dynamic once stalled on its
last step under overlapped syncs, a combination no other test ran."""

from __future__ import annotations

import json

import pytest

from dartfl.cli.main import main
from dartfl.datacenter.types import SYNC_MODES

POLICIES = ("sync", "one-step", "static:0.5", "dart", "verl-dynamic", "verl-dynamic:0.2")
WORKLOADS = (None, "rlvr", "long-prompt", "agentic", "agentic-swe")  # None: no preset
STEPS = 12


@pytest.mark.parametrize("sync_mode", SYNC_MODES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_policy_finishes_within_its_bound(
    workload: str | None, sync_mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["dc", "sim", "--gpus", "16", "--steps", str(STEPS), "--eta", "1"]
    argv += ["--workload", workload] if workload else []
    argv += ["--sync-mode", sync_mode, "--seed", "3", "--json", "--no-store", "--no-plot"]
    for policy in POLICIES:
        argv += ["--policy", policy]
    assert main(argv) == 0, capsys.readouterr().err
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["policy"] for r in results] == list(POLICIES)
    for r in results:
        assert r["steps"] == STEPS and r["samples_per_s"] > 0, r["policy"]
        assert r["staleness_max"] <= r["eta"], r["policy"]  # one-step fixes its own eta, 1
