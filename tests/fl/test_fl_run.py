"""`dartfl fl run` against a SuperLink that is already running: a real local deployment (one
SuperLink, two SuperNodes running the simulation back end of the ClientApp, no agents) gets a
one-round run from the command as a separate process, which must exit 0 after the run has
checkpointed and recorded its round. Bad targets and bad run configs fail fast without Flower.
Run the grid test under `scripts/loopback-run` like the other Flower tests."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.errors import ConfigError
from dartfl.store import RunStore
from messaging.brokers import free_port
from orchestration.flower_processes import LocalSuperLink, ManagedProcess, start_process
from orchestration.remote_run import SuperLinkTarget

_BIN = Path(sys.executable).parent


def _loopback_only() -> bool:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines) == ["lo"]


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:9093", ("127.0.0.1", 9093, True)),
        ("superlink.example", ("superlink.example", 8000, False)),
        ("[::1]:8000", ("::1", 8000, True)),
        ("localhost:1", ("localhost", 1, True)),
    ],
)
def test_superlink_addresses_parse(address: str, expected: tuple[str, int, bool]) -> None:
    target = SuperLinkTarget.parse(address)
    assert (target.host, target.port, target.is_loopback) == expected


@pytest.mark.parametrize("address", ["http://h:8000", "h:port", "h:0", "h:70000", ":8000"])
def test_bad_superlink_addresses_are_refused(address: str) -> None:
    with pytest.raises(ConfigError, match="--superlink"):
        SuperLinkTarget.parse(address)


def test_an_unreachable_superlink_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens there
    assert main(["fl", "run", "--superlink", f"127.0.0.1:{port}", "--insecure"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"dartfl: failed: no SuperLink answers at 127.0.0.1:{port}")
    assert "flower-superlink" in err


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("no-such-key=1", "unknown run-config key"),
        ("num-server-rounds=0", "num-server-rounds must be >= 1"),
        ("checkpoint-dir=ckpt", "absolute path on the SuperLink's host"),
    ],
)
def test_bad_run_config_exits_2_before_contacting_the_superlink(
    setting: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fl", "run", "--superlink", "127.0.0.1:1", "--insecure", "--set", setting]) == 2
    assert complaint in capsys.readouterr().err


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[str]:
    """A SuperLink and two SuperNodes on loopback; yields the SuperLink's address."""
    with LocalSuperLink(tmp_path, simulation=False) as link:
        env = link.env
        superlink = f"127.0.0.1:{link.port}"
        nodes: list[ManagedProcess] = []
        try:
            for i in range(2):
                args = [
                    str(_BIN / "flower-supernode"), "--insecure", "--superlink", superlink,
                    "--port", str(free_port()), "--node-config", f"partition-id={i} num-partitions=2",
                ]  # fmt: skip
                nodes.append(start_process(args, env, tmp_path / f"supernode-{i}.log"))
            yield superlink
        finally:
            for node in nodes:
                node.stop()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(not _loopback_only(), reason="run the Flower tests under scripts/loopback-run")
def test_fl_run_submits_to_a_running_superlink_and_waits_for_the_end(deployment: str, tmp_path: Path) -> None:
    store, ckpt = tmp_path / "runs.sqlite", tmp_path / "ckpt"
    settings = {
        "num-server-rounds": 1,
        "min-available-nodes": 2,
        "max-train-per-task": 200,
        "max-test-per-task": 100,
        "round-deadline-s": 2.0,
        "node-wait-s": 60.0,
        "store": store,
        "checkpoint-dir": ckpt,
        "run-label": "fl-run-test",
    }
    args = [sys.executable, "-m", "dartfl.cli.main", "fl", "run", "--superlink", deployment, "--insecure"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    started = re.search(rf"^run (\d+) started on {re.escape(deployment)}$", done.stdout, re.MULTILINE)
    assert started, done.stdout
    assert f"run {started.group(1)}: finished:completed" in done.stdout
    assert f"checkpoint-dir: {ckpt} (on the SuperLink's host)" in done.stdout
    assert "federated run done" in done.stderr  # the ServerApp's log, streamed
    assert (ckpt / "round-0001.json").is_file()
    with RunStore(store) as runs:
        [run] = runs.list_runs(kind="fl")
        assert (run.label, run.status) == ("fl-run-test", "ok")
        [result] = runs.results(run.run_id).values()
        assert [h["round"] for h in result["history"]] == [1]
        assert result["history"][0]["replies"] == 2  # both SuperNodes trained the round


@pytest.mark.parametrize(
    ("command", "setting", "complaint"),
    [
        ("sim", "policy=nope", "use --policy"),
        ("sim", "num-server-rounds=3", "use --rounds"),
        ("sim", "seed=4", "use --seed"),
        ("sim", "learning_rate=0.1", "unknown run-config key(s) ['learning_rate']"),
        ("sim", "workloads=nope", "valid generators are"),
        ("deploy-local", "round-deadline-s=3", "use --round-s"),
        ("deploy-local", "no-such-key=1", "unknown run-config key"),
    ],
)
def test_fl_sim_and_deploy_local_refuse_a_set_they_would_ignore_or_fail_on(
    command: str, setting: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `fl sim --set policy=nope` ran the default policies for minutes; an unknown key failed
    # only after the SuperLink started, with Flower's "Invalid run configuration".
    assert main(["fl", command, "--set", setting]) == 2
    assert complaint in capsys.readouterr().err


def test_fl_sim_refuses_a_plot_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plots").write_text("")
    assert main(["fl", "sim", "--plot-dir", str(tmp_path / "plots")]) == 2
    assert "is a file" in capsys.readouterr().err
