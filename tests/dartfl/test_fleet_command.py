"""The `dartfl fleet` command: its JSON contract and the run it records, its table, the same
numbers for the same seed, and bad input refused with exit code 2."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.profiles import get_profile, parse_profile
from dartfl.store import RunStore

CONTRACT_KEYS = {
    "policy",
    "devices",
    "requests",
    "rejected",
    "slo_attainment",
    "slo_attainment_p5",
    "slo_attainment_p50",
    "train_samples",
    "harvest_efficiency",
    "harvest_efficiency_p5",
    "harvest_efficiency_p50",
    "max_backlog",
}
FLEET_ARGS = [
    "fleet",
    "--devices",
    "6",
    "--duration-s",
    "30",
    "--profile",
    "pi4",
    "--cores",
    "1",
    "--workers",
    "1",
    "--seed",
    "4",
]


def test_fleet_json_has_the_contract_keys_and_is_recorded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    args = [*FLEET_ARGS, "--policy", "dart", "--policy", "inference-first:4", "--json", "--store", str(store)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["results"]] == ["dart", "inference-first:4"]
    for result in out["results"]:
        assert set(result) >= CONTRACT_KEYS
        assert result["devices"] == 6
    with RunStore(store) as runs:
        run = runs.get_run(out["run_id"])
        assert run is not None and run.kind == "fleet" and run.status == "ok"
        assert set(runs.results(out["run_id"])) == {"dart", "inference-first:4"}
        recorded = parse_profile(tomllib.loads(run.config["profile_toml"]))
        assert recorded == get_profile("pi4").with_cores(1)  # as run: --cores 1


def test_fleet_table_and_same_seed_same_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FLEET_ARGS, "--no-store"]) == 0
    table = capsys.readouterr().out
    assert "dart" in table and "inference-first:4" in table and "harvest" in table
    assert main([*FLEET_ARGS, "--no-store", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["results"]
    assert main([*FLEET_ARGS, "--no-store", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == first


@pytest.mark.parametrize(
    "extra",
    [
        ["--policy", "threshold"],
        ["--workload-mix", "poisson,bogus"],
        ["--workload-mix", "poisson,,mmpp"],  # an empty name was dropped without a word
        ["--devices", "0"],
        ["--load-jitter", "1.5"],
        ["--cores", "4", "--policy", "cores:2"],  # a split is all it does: not modelled
        ["--cores", "4", "--policy", "dart:2"],  # positional knobs cannot take split=off too
        ["--cores", "5"],
        ["--duration-s", "1e9"],  # a MemoryError traceback before the guard
        ["--period-s", "1e-7"],  # ran until killed
        ["--devices", "100000000"],  # likewise
        ["--period-s", "7"],  # ran 35 s, not 30, and said 30: a horizon rounded up to periods
        ["--period-s", "30"],  # one period: trained nothing, silently
        ["--tasks", ",".join(f"t{i}" for i in range(300))],  # tasks^2 memory: 20,000 took 12 GB
    ],
)
def test_fleet_bad_input_exits_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FLEET_ARGS, "--no-store", *extra]) == 2
    assert "dartfl: error:" in capsys.readouterr().err


def test_on_a_multi_core_profile_dart_runs_time_shared_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The fleet model time-shares a device's cores: the README's `--profile pi4` runs DART with
    its split off, under that name, with a note, rather than refusing the default policies."""
    at = FLEET_ARGS.index("--cores")
    whole_device = FLEET_ARGS[:at] + FLEET_ARGS[at + 2 :]
    assert main([*whole_device, "--no-store", "--json"]) == 0
    out = capsys.readouterr()
    assert "note: the fleet model time-shares the 4 cores of pi4" in out.err
    implicit = json.loads(out.out)["results"]
    assert [r["policy"] for r in implicit] == ["dart:split=off", "inference-first:4"]
    assert main([*whole_device, "--no-store", "--json", "--policy", "dart:split=off"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0] == implicit[0]
    # An explicit split=on ran as dart:split=on,split=off, refused as a key given twice.
    assert main([*whole_device, "--no-store", "--json", "--policy", "dart:split=on,v=2"]) == 0
    out = capsys.readouterr()
    assert "runs as dart:v=2,split=off" in out.err
    assert json.loads(out.out)["results"][0]["policy"] == "dart:v=2,split=off"
