"""The wheel, installed like any package, runs its commands from a directory that is not the
checkout, with PYTHONPATH cleared: `dartfl sim`, `dartfl fl sim` (Flower's ServerApp from the
wheel too), `dartfl edge run` (its own Mosquitto, one request answered), `dartfl dashboard`,
and a policy plugin installed beside it (the wheel and the venv: tests/wheel_fixtures.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugin_fixtures import install_example
from tests.wheel_fixtures import FreshVenv, loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_sim_runs_on_the_bundled_trace_and_records(fresh: FreshVenv) -> None:
    # By its name: the wheel's user has no checkout to find the file in.
    done = fresh.run(
        "dartfl", "sim", "--trace", "azure-conv", "--duration-s", "120", "--target-load", "0.5",
        "--profile", "pi4", "--policy", "dart", "--policy", "inference-first", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    assert [r["policy"] for r in results][:2] == ["dart", "inference-first"]
    assert fresh.store.is_file()
    listed = fresh.run("dartfl", "runs", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)


def test_a_policy_plugin_installed_beside_the_wheel_runs_in_sim(fresh: FreshVenv) -> None:
    # A wheel user's own policy (docs/plugins.md): the example package, installed into the
    # same site-packages, is built by name from the wheel's registry.
    install_example(fresh.site)
    done = fresh.run(
        "dartfl", "sim", "--workload", "poisson", "--duration-s", "20", "--profile", "pi4",
        "--policy", "slack", "--policy", "slack:0.3", "--json", "--no-store",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    assert [r["policy"] for r in results] == ["slack", "slack:0.3"]
    assert all(r["train_samples"] > 0 for r in results)


@pytest.mark.skipif(not loopback_only(), reason="Ray needs a loopback-only namespace: scripts/loopback-run")
def test_fl_sim_runs_the_packaged_app_on_the_wheels_code(fresh: FreshVenv) -> None:
    done = fresh.run(
        "dartfl", "fl", "sim", "--clients", "2", "--rounds", "2", "--policy", "dart", "--json",
        "--set", "max-train-per-task=400", "--set", "max-test-per-task=200", "--set", "favourite-tasks=",
        timeout_s=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = json.loads(done.stdout)["results"]
    assert result["rounds"] == 2 and [h["replies"] for h in result["history"]] == [2, 2]
    # Flower's ServerApp process said where it was imported from: the wheel.
    origin = re.search(r"ServerApp \((\S+server_app\.py)\)", done.stderr)
    assert origin is not None, done.stderr[-3000:]
    assert Path(origin.group(1)).is_relative_to(fresh.site)
    assert re.search(r"round 2/2: updates from 2 of 2 nodes", done.stderr)


def test_edge_run_serves_a_request_through_its_own_mosquitto(fresh: FreshVenv, tmp_path: Path) -> None:
    from dartfl.profiles import get_profile, profile_to_toml
    from tests.messaging.mqtt_fixtures import ask_then_stop

    profile = tmp_path / "x86.toml"
    profile.write_text(profile_to_toml(get_profile("x86-1core")))
    args = ["edge", "run", "--device", "wheel", "--tasks", "digits", "--max-train", "200"]
    args += ["--publish-every-s", "0", "--profile-file", str(profile)]
    agent = subprocess.Popen(
        [str(fresh.bin / "dartfl"), *args], cwd=fresh.cwd, env=fresh.env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, reply, out, err = ask_then_stop(agent, "wheel", timeout_s=180)
    assert reply.status == "ok" and reply.label is not None
    assert agent.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["device"] == "wheel"


@pytest.fixture
def dashboard(fresh: FreshVenv) -> Iterator[tuple[subprocess.Popen[str], int]]:
    from messaging.brokers import free_port

    if not fresh.store.exists():  # the sim test records one; alone, record one here
        assert (
            fresh.run("dartfl", "sim", "--workload", "poisson", "--duration-s", "20", "--json").returncode
            == 0
        )
    port = free_port()
    proc = subprocess.Popen(
        [str(fresh.bin / "dartfl"), "dashboard", "--port", str(port)], cwd=fresh.cwd, env=fresh.env,
        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dashboard_serves_the_wheels_app_on_loopback(
    fresh: FreshVenv, dashboard: tuple[subprocess.Popen[str], int]
) -> None:
    proc, port = dashboard
    deadline = time.monotonic() + 90
    health = ""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                health = answer.read().decode()
                break
        except OSError:
            time.sleep(0.5)
    assert health == "ok", proc.stdout.read() if proc.stdout and proc.poll() is not None else "no answer"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
        assert page.status == 200 and "<title>" in page.read().decode().lower()
    # `dartfl dashboard` became Streamlit (exec); it runs the wheel's dashboard/app.py.
    argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    [app] = [Path(a.decode()) for a in argv if a.endswith(b"app.py")]
    assert app.is_relative_to(fresh.site / "dartfl_dashboard")
