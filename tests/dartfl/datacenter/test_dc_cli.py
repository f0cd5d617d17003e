"""`dartfl dc sim` and `dc run`: the JSON contract, the sweep, the plots, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ray_engine
from dartfl.cli.dc_cmd import CONTRACT_KEYS
from dartfl.cli.main import main
from ray_engine import RayRun, RayRunConfig

KEYS = set(CONTRACT_KEYS)


def test_dc_sim_json_has_the_contract_keys_and_the_best_static(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dc", "sim", "--gpus", "16", "--steps", "20", "--length-drift", "2", "--policy", "sync"]
    rc = main([*argv, "--policy", "dart", "--sweep-static", "--seed", "1", "--json", "--no-store"])
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
    argv = ["dc", "sim", "--gpus", "8", "--steps", "5", "--lengths", "trace", "--policy", "dart"]
    rc = main([*argv, "--plot", str(png), "--no-store"])
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
        (["--workload", "agentic", "--median-tokens", "300"], "--median-tokens applies to single-turn"),
        (["--workload", "rlvr", "--kv", "evict"], "--kv applies to agentic"),
    ],
)
def test_dc_sim_bad_input_exits_2_naming_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dc", "sim", "--gpus", "8", "--steps", "2", "--no-store", "--json", *argv]) == 2
    assert message in capsys.readouterr().err


def _fake_ray_run(config: RayRunConfig, specs: list[str]) -> list[RayRun]:
    """Books shaped like a real run's, without starting Ray."""
    runs = []
    for spec in specs:
        run = RayRun(spec, 0 if spec == "sync" else config.eta, group_size=config.group_size)
        for step in range(config.steps):
            group = {
                "tokens": np.zeros((4, 5), dtype=np.int64),
                "reward": np.full(4, 0.1 + 0.01 * step),
                "version": step,
            }
            run.trained([group], step)
            run.record(0.25 * step, 1, config.workers - 1, 0, 6.0)
        run.wall_s = 0.25 * config.steps
        runs.append(run)
    return runs


def test_dc_run_json_has_the_contract_keys_and_writes_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_engine, "run_ray", _fake_ray_run)
    png = tmp_path / "run.png"
    argv = ["dc", "run", "--workers", "3", "--steps", "4", "--json", "--no-store", "--plot", str(png)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["results"]] == ["sync", "dart"]
    for r in out["results"]:
        assert set(r) >= KEYS
        assert r["tokens_per_s"] > 0
    assert png.stat().st_size > 1000


def test_dc_run_refuses_an_unknown_policy_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dc", "run", "--policy", "one-step", "--no-store", "--json"]) == 2
    err = capsys.readouterr().err
    assert "unknown Ray engine policy 'one-step'" in err and "verl-dynamic" in err


def test_dc_sim_records_per_period_decisions_and_staleness_the_dashboard_charts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Datacenter page draws GPU roles, buffer depth, throughput and staleness from the
    # store; before `dc sim` recorded decisions, only the summary bars appeared.
    from dartfl.store import RunStore
    from dashboard.data import dc_frames

    store = tmp_path / "runs.sqlite"
    argv = ["dc", "sim", "--gpus", "16", "--steps", "12", "--policy", "dart", "--policy", "verl-dynamic:0.3"]
    assert main([*argv, "--json", "--no-plot", "--store", str(store)]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    with RunStore(store) as s:
        run = s.get_run(run_id)
        assert run is not None
        assert run.label == "dc sim: 16 GPUs"  # was "16 workers/GPUs" for either command
        frames = dc_frames(s, run)
        results = s.results(run_id)
        trained = {p: sum(d.trained_samples for d in s.decisions(run_id, p)) for p in results}
    assert set(frames["roles"]["policy"]) == {"dart", "verl-dynamic:0.3"}
    assert frames["roles"]["gpus"].max() <= 16 and (frames["buffer"]["depth"] > 0).any()
    assert (frames["throughput"]["samples_per_s"] > 0).any()
    stale = frames["staleness"]
    assert set(stale["policy"]) == {"dart", "verl-dynamic:0.3"} and stale["lag"].max() <= 2
    for policy, summary in results.items():  # the periods' samples add up to the run's
        assert trained[policy] == summary["trained_samples"] == 12 * 64 * 8


def test_dc_sim_agentic_preset_reports_switches_aborted_and_idle_gpu_seconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["dc", "sim", "--gpus", "16", "--steps", "6", "--workload", "agentic", "--kv", "evict"]
    assert (
        main([*argv, "--policy", "verl-dynamic:0.2", "--policy", "static:0.5", "--json", "--no-store"]) == 0
    )
    by = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    for r in by.values():
        assert set(r) >= KEYS and r["idle_gpu_s"] > 0
    assert by["verl-dynamic:0.2"]["switches"] > 0 and by["verl-dynamic:0.2"]["aborted_gpu_s"] > 0
    assert by["static:0.5"]["switches"] == 0
