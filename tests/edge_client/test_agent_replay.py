"""`dartfl edge replay --spawn-agent` end to end: a replay that loses nothing, and one sized by
what the agent measures under traffic rather than by its profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl import protocol
from dartfl.cli.main import main
from dartfl.profiles import load_profile_toml
from dartfl.store import RunStore
from orchestration.replay_report import HEADLINE_KEYS
from tests.edge_client.agent_fixtures import TASKS

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_replay_with_a_spawned_agent_loses_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    args = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--duration-s", "8", "--rate", "40"]
    args += ["--slo-ms", "250", "--json", "--store", str(store), "--agent-arg=--max-train", "--agent-arg=300"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    with RunStore(store) as runs:  # the JSON names the run it recorded, as sim's and fleet's do
        run = runs.get_run(out["run_id"])
        assert run is not None and run.kind == "replay" and run.status == "ok"
    assert set(HEADLINE_KEYS) <= set(out) and set(out["send_lag_s"]) == {"p50", "p95", "p99", "max"}
    assert out["requests"] > 200
    assert out["lost"] == 0 and out["errors"] == 0
    assert out["replies"] == out["requests"]
    assert out["train_samples"] > 0
    assert 0.0 < out["harvest_efficiency"] <= 1.0  # against the real device's fluid limit
    assert out["agent_report"]["requests"] == out["requests"] + 1  # and the replay's probe request


@pytest.mark.slow
def test_a_replay_sized_by_the_agent_is_sized_by_what_it_measures_under_traffic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 13: sized by the agent's calibration, the README's replay sent several times what
    # the agent could serve. Here the agent starts from a profile 100x too cheap.
    cheap = tmp_path / "cheap.toml"
    cheap.write_text(
        "name = 'cheap'\n[inference]\nbatch-fixed-s = 1e-6\nper-request-s = 1e-6\nmax-batch = 32\n"
        "[training]\nmicrobatch-fixed-s = 1e-3\nper-sample-s = 1e-3\nmax-microbatch = 32\n"
        "[request-path]\nreceive-s = 1e-6\ningress-s = 1e-6\negress-s = 1e-6\n"
    )
    said = load_profile_toml(cheap).capacity_per_s(TASKS, (1.0,) * len(TASKS))
    args = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--duration-s", "5"]
    args += ["--target-load", "0.3", "--json", "--no-store", "--policy", "inference-only"]
    args += [f"--agent-arg=--profile-file={cheap}", "--agent-arg=--max-train", "--agent-arg=300"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert "under traffic" in caplog.text  # it says why it sends before the replay
    learnt = protocol.profile_from_json(out["agent_report"]["profile"])
    measured = learnt.capacity_per_s(TASKS, (1.0,) * len(TASKS))
    sized = out["sized_capacity_per_s"]
    assert sized < said / 20  # the warm-up found out what the agent's requests cost
    # The price moves with the host's load between the warm-up and the end of the replay (on a
    # busy 2-core CI host: 1,086/s after the warm-up, 672/s at the end), but stays far from
    # the profile's 248,062/s.
    assert measured / 2.5 < sized < measured * 2.5
    rate = out["requests"] / 5.0
    assert rate == pytest.approx(0.3 * sized, rel=0.2)  # and the replay was sized by it
    assert out["lost"] == 0 and out["replies"] == out["requests"]
