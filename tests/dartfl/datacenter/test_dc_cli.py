"""`dartfl dc sim`: the JSON contract, the sweep, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl.cli.main import main

KEYS = {
    "policy",
    "samples_per_s",
    "tokens_per_s",
    "steps",
    "rollout_idle_ratio",
    "trainer_idle_ratio",
    "staleness_max",
    "staleness_mean",
    "dropped_samples",
    "switches",
}


def test_dc_sim_json_has_the_contract_keys_and_the_best_static(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "dc",
            "sim",
            "--gpus",
            "16",
            "--steps",
            "20",
            "--length-drift",
            "2",
            "--policy",
            "sync",
            "--policy",
            "dart",
            "--sweep-static",
            "--seed",
            "1",
            "--json",
            "--no-store",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    by = {r["policy"]: r for r in out["results"]}
    assert {"sync", "dart"} <= set(by)
    statics = [p for p in by if p.startswith("static:")]
    assert len(statics) == 1
    for r in out["results"]:
        assert set(r) >= KEYS
        assert r["steps"] == 20
    best = max(s["samples_per_s"] for s in out["static_sweep"])
    assert by[statics[0]]["samples_per_s"] == pytest.approx(best)


def test_dc_sim_with_trace_lengths_writes_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "dc.png"
    rc = main(
        [
            "dc",
            "sim",
            "--gpus",
            "8",
            "--steps",
            "5",
            "--lengths",
            "trace",
            "--policy",
            "dart",
            "--plot",
            str(png),
            "--no-store",
        ]
    )
    assert rc == 0
    assert png.stat().st_size > 1000
    assert "dart" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "nope"], "valid policies"),
        (["--model-size", "9q"], "valid:"),
        (["--eta", "-1"], "--eta"),
        (["--length-drift", "0"], "--length-drift"),
    ],
)
def test_dc_sim_bad_input_exits_2_naming_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dc", "sim", "--gpus", "8", "--steps", "2", "--no-store", "--json", *argv]) == 2
    assert message in capsys.readouterr().err
