"""Policies from other installed packages: built, checked and run beside the built-ins, and
refused with one line that names the plugin when something is wrong (docs/plugins.md)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError, PolicyError
from dartfl.executor import DeviceExecutor, RoundClock
from dartfl.policies import EDGE_POLICIES, DartPolicy, make_policy
from dartfl.policies.base import Policy
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.sim.fleet_policies import make_fleet_policy
from dartfl.types import TaskSpec
from tests.plugin_fixtures import install_example, on_path, write_plugin
from workloads import generate

CRASHING = """
from dartfl.policies.base import Policy
from dartfl.policies.inference_first import InferenceFirst
from dartfl.registry import Entry, Knob
from dartfl.types import Allocation


class Crash(InferenceFirst):
    \"\"\"Trains like inference-first until t = 1 s, then fails.\"\"\"

    def decide(self, obs):
        if obs.now_s > 1.0:
            return 1 / 0
        return super().decide(obs)


class BadShare(InferenceFirst):
    def decide(self, obs):
        return Allocation(2.0, (1.0,) * 0 + tuple(1 / obs.num_tasks for _ in range(obs.num_tasks)),
                          (1.0,) * obs.num_tasks, 1, obs.max_batch)


class NotAnAllocation(InferenceFirst):
    def decide(self, obs):
        return {"microbatch": 4}


class FourShares(InferenceFirst):
    def decide(self, obs):
        return Allocation(1.0, (0.25,) * 4, (1.0,) * 4, 8, obs.max_batch)


class HugeStep(InferenceFirst):
    def decide(self, obs):
        return self.allocation(obs, 1.0, 10**9)


class EmptyMean(InferenceFirst):
    def decide(self, obs):
        import statistics

        return statistics.mean([])


class NeedsArgument(InferenceFirst):
    def __init__(self, m):
        super().__init__(m)


class Abstract(Policy):
    pass


class NoGpu(InferenceFirst):
    def __init__(self, loss_weighting="uniform"):
        raise RuntimeError("no GPU here")


class Weighted(InferenceFirst):
    \"\"\"Takes the loss weighting it is given.\"\"\"


class Unweighted(Policy):
    def __init__(self):
        self.loss_weighting = "none"

    def decide(self, obs):
        return InferenceFirst().decide(obs)


def _no_weighting(m):
    return InferenceFirst(m)


NO_WEIGHTING = Entry("no-weighting", "no-weighting:<m>", "forgot loss_weighting", _no_weighting,
                     (Knob("m", int, "step"),), positional=1)
NOT_A_POLICY = Entry("not-a-policy", "not-a-policy", "builds an object", lambda **_: object())
"""


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory.mktemp("site"))


def _cli(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`dartfl COMMAND` (split on spaces) with `root` on the path, as an installed package is."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "dartfl.cli.main", *command.split()],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_the_example_plugin_runs_beside_the_built_in_policies_in_dartfl_sim(
    example: Path, tmp_path: Path
) -> None:
    policies = "--policy dart --policy slack --policy slack:margin=0.3"
    store = tmp_path / "runs.db"
    run = _cli(
        example,
        f"sim --workload pareto-onoff --duration-s 30 --profile pi4 {policies} --json --store {store}",
    )
    assert run.returncode == 0, run.stderr
    results = {r["policy"]: r for r in json.loads(run.stdout)["results"]}
    assert set(results) == {"dart", "slack", "slack:margin=0.3"}
    assert results["slack"]["train_samples"] > 0
    # A larger reserve means shorter steps: the knob reached the plugin's policy.
    assert results["slack:margin=0.3"]["p99_latency_s"] < results["slack"]["p99_latency_s"]
    # The stored run says which code made the plugin's results, and reads without the plugin.
    shown = subprocess.run(
        [sys.executable, "-m", "dartfl.cli.main", "runs", "show", "1", "--json", "--store", str(store)],
        capture_output=True,
        text=True,
        check=True,
    )
    config = json.loads(shown.stdout)["run"]["config"]
    assert config["policy_plugins"] == {"slack": "slack_policy:SLACK from dartfl-slack-policy 0.1.0"}


def test_a_plugins_knobs_are_read_and_checked_like_a_built_in_policys(
    example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path(monkeypatch, example, "slack_policy")
    policy = make_policy("slack:0.3")
    assert policy.name == "slack:0.3" and policy.margin == 0.3  # type: ignore[attr-defined]
    assert make_policy("slack:margin=0.25").margin == 0.25  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"policy 'slack:2': margin must lie in \[0, 1\), got 2"):
        make_policy("slack:2")
    with pytest.raises(ConfigError, match="unknown key 'v'; valid: margin"):
        make_policy("slack:v=1")


def test_an_unknown_name_lists_the_installed_plugins_with_their_package(
    example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path(monkeypatch, example, "slack_policy")
    with pytest.raises(ConfigError) as err:
        make_policy("slak")
    assert "inference-first[:m]" in str(err.value)
    lines = str(err.value).splitlines()
    listed = next(line for line in lines if line.strip().startswith("slack[:margin]"))
    assert (
        "fits the SLO's slack (example plugin) (plugin slack_policy:SLACK from dartfl-slack-policy 0.1.0)"
        in listed
    )
    # Aligned with the built-in policies' column.
    builtin = next(line for line in lines if line.strip().startswith("inference-only"))
    assert listed.index("largest") == builtin.index("never trains")


def test_a_policy_class_is_built_without_arguments_under_its_entry_point_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_plugin(
        tmp_path,
        "plain-pkg",
        {"plain": "plain_policy:Plain"},
        "plain_policy",
        CRASHING.replace("class Crash", "class Plain(InferenceFirst):\n    pass\n\n\nclass Crash"),
    )
    on_path(monkeypatch, root, "plain_policy")
    policy = make_policy("plain")
    assert type(policy).__name__ == "Plain" and policy.name == "plain"
    with pytest.raises(ConfigError, match="expected plain"):
        make_policy("plain:4")  # no knobs


@pytest.mark.parametrize(
    ("value", "source", "problem"),
    [
        (
            "missing_module:Thing",
            "",
            "cannot be loaded: ModuleNotFoundError: No module named 'missing_module'",
        ),
        (
            "broken_policy:Thing",
            "raise RuntimeError('no GPU here')\n",
            "cannot be loaded: RuntimeError: no GPU here",
        ),
        ("broken_policy:THING", "THING = 42\n", "is a int, not a dartfl.policies.base.Policy subclass"),
    ],
)
def test_a_plugin_that_cannot_be_used_is_one_line_naming_it_and_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, source: str, problem: str
) -> None:
    root = write_plugin(tmp_path, "broken-pkg", {"broken": value}, "broken_policy", source)
    on_path(monkeypatch, root, "broken_policy")
    with pytest.raises(ConfigError) as err:
        make_policy("broken")
    message = str(err.value)
    assert message.startswith(f"policy plugin 'broken' ({value}, from broken-pkg 0.1)")
    assert problem in message and "\n" not in message


def test_a_plugin_cannot_shadow_a_built_in_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = write_plugin(tmp_path, "shadow-pkg", {"dart": "crash_policy:Crash"}, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    assert isinstance(make_policy("dart"), DartPolicy)
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError):
        make_policy("nothing-by-this-name")
    assert (
        "policy plugin 'dart' (crash_policy:Crash, from shadow-pkg 0.1) has the name of a built-in"
        in caplog.text
    )


def test_two_packages_with_one_plugin_name_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plugin(tmp_path, "one-pkg", {"twin": "crash_policy:Crash"}, "crash_policy", CRASHING)
    write_plugin(tmp_path, "two-pkg", {"twin": "crash_policy:Crash"}, "crash_policy", CRASHING)
    on_path(monkeypatch, tmp_path, "crash_policy")
    with pytest.raises(ConfigError, match=r"registered by several packages \(one-pkg 0.1, two-pkg 0.1\)"):
        make_policy("twin")
    listed = [line for line in EDGE_POLICIES.help_lines(with_plugins=True) if line.startswith("twin")]
    assert len(listed) == 1 and "registered by several packages (one-pkg 0.1, two-pkg 0.1)" in listed[0]


def _simulate(spec: str) -> None:
    arrivals = generate(
        "poisson", duration_s=5.0, rate_per_s=20.0, task_names=("a", "b"), rng=np.random.default_rng(1)
    )
    tasks = [TaskSpec(name, 0.25) for name in arrivals.task_names]
    simulate(arrivals, get_profile("pi4"), tasks, make_policy(spec), SimConfig(), np.random.default_rng(1))


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (
            "Crash",
            r"policy 'crash' failed at t = 1\.\d+ s: "
            r"ZeroDivisionError: division by zero \(.*crash_policy\.py:\d+\)",
        ),
        # The line at fault is the plugin's, not the check in dartfl that refused its value.
        (
            "BadShare",
            r"ConfigError: inference_share must lie in \[0, 1\], got 2\.0 \(.*crash_policy\.py:\d+\)",
        ),
        (
            "FourShares",
            r"policy 'crash' decided at t = 0\.\d+ s 4 task shares for 2 tasks: give one per task",
        ),
        (
            "HugeStep",
            r"decided at t = 0\.\d+ s microbatch 1000000000, above the device's 32 \(obs\.max_microbatch\)",
        ),
        # The line at fault is the policy's own, not the library's that raised.
        ("EmptyMean", r"StatisticsError: mean requires at least one data point \(.*crash_policy\.py:\d+\)"),
        (
            "NotAnAllocation",
            r"policy 'crash' decided at t = 0\.\d+ s a dict; decide must return a dartfl\.types\.Allocation",
        ),
    ],
)
def test_a_policy_that_fails_while_it_runs_stops_the_simulator_naming_it_and_the_line_at_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, obj: str, problem: str
) -> None:
    root = write_plugin(tmp_path, "crash-pkg", {"crash": f"crash_policy:{obj}"}, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    with pytest.raises(PolicyError, match=problem):
        _simulate("crash")


def test_the_cli_says_a_failing_policy_in_one_line_keeps_the_others_results_and_exits_1(
    tmp_path: Path,
) -> None:
    root = write_plugin(tmp_path, "crash-pkg", {"crash": "crash_policy:Crash"}, "crash_policy", CRASHING)
    store = tmp_path / "runs.db"
    policies = "--policy dart --policy crash --policy inference-first"
    run = _cli(root, f"sim --workload poisson --duration-s 5 --profile pi4 {policies} --json --store {store}")
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dartfl: failed: policy 'crash' failed at t = 1.")
    out = json.loads(run.stdout)
    assert [r["policy"] for r in out["results"]] == ["dart", "inference-first"]
    [failed] = out["failed"]
    assert failed["policy"] == "crash" and failed["error"].startswith("policy 'crash' failed at t = 1.")
    assert out["run_id"] == 1  # the results that stand are recorded, the run as failed
    shown = subprocess.run(
        [sys.executable, "-m", "dartfl.cli.main", "runs", "show", "1", "--json", "--store", str(store)],
        capture_output=True,
        text=True,
        check=True,
    )
    run_info = json.loads(shown.stdout)["run"]
    assert run_info["status"] == "failed" and run_info["config"]["failed"] == out["failed"]
    assert run_info["config"]["policy_plugins"] == {"crash": "crash_policy:Crash from crash-pkg 0.1"}
    alone = _cli(root, "sim --workload poisson --duration-s 5 --profile pi4 --policy crash --json --no-store")
    assert alone.returncode == 1
    assert json.loads(alone.stdout) == {"results": [], "run_id": None, "failed": out["failed"]}


def test_the_fleet_simulator_refuses_a_plugin_and_says_why(
    example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path(monkeypatch, example, "slack_policy")
    with pytest.raises(
        ConfigError, match=r"policy 'slack' is a plugin .*the fleet simulator runs its own policies"
    ):
        make_fleet_policy("slack")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            "crash_policy:NeedsArgument",
            "cannot be built: TypeError: NeedsArgument.__init__() missing 1 required positional "
            "argument: 'm'; a Policy subclass is built with no arguments but loss_weighting: "
            "declare an Entry for knobs",
        ),
        ("crash_policy:Abstract", "cannot be built: TypeError: Can't instantiate abstract class Abstract"),
        ("crash_policy:NoGpu", "cannot be built: RuntimeError: no GPU here"),
        ("crash_policy:NO_WEIGHTING", "unexpected keyword argument 'loss_weighting'"),
        ("crash_policy:NOT_A_POLICY", "built a object, not a dartfl.policies.base.Policy"),
    ],
)
def test_a_plugin_that_cannot_be_built_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    name = value.split(":")[1].lower().replace("_", "-")
    root = write_plugin(tmp_path, "build-pkg", {name: value}, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    with pytest.raises(ConfigError) as err:
        make_policy(name + (":4" if name == "no-weighting" else ""))
    message = str(err.value)
    spec = name + (":4" if name == "no-weighting" else "")
    assert message.startswith(f"policy {spec!r}: plugin {value} from build-pkg 0.1 ")
    assert problem in message and "\n" not in message


def test_a_policy_class_gets_the_loss_weighting_only_if_it_takes_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = {"weighted": "crash_policy:Weighted", "unweighted": "crash_policy:Unweighted"}
    root = write_plugin(tmp_path, "weights-pkg", points, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    policy = make_policy("weighted", "demand")
    assert policy.loss_weighting == "demand" and policy.name == "weighted+demand"  # type: ignore[attr-defined]
    assert make_policy("unweighted").loss_weighting == "none"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="takes no loss weighting, so --loss-weights demand cannot apply"):
        make_policy("unweighted", "demand")


def test_naming_a_built_in_that_a_plugin_also_claims_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = write_plugin(tmp_path, "shadow2-pkg", {"static": "crash_policy:Crash"}, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    with caplog.at_level(logging.WARNING):
        make_policy("static:0.5")
        make_policy("static:0.7")
    said = [r for r in caplog.records if "policy plugin 'static'" in r.getMessage()]
    assert len(said) == 1 and "has the name of a built-in policy, which runs instead" in said[0].getMessage()


def test_a_plugin_name_no_spec_can_give_is_not_listed_but_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = write_plugin(tmp_path, "colon-pkg", {"co:lon": "crash_policy:Crash"}, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as err:
        make_policy("co:lon")
    assert "co:lon" not in str(err.value).split("valid policies:")[1]
    assert (
        "policy plugin 'co:lon' (crash_policy:Crash, from colon-pkg 0.1) has a name no --policy can give"
        in (caplog.text)
    )


def test_a_device_that_must_not_stop_decides_with_its_fallback_on_the_same_observation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_plugin(tmp_path, "crash-pkg", {"crash": "crash_policy:Crash"}, "crash_policy", CRASHING)
    on_path(monkeypatch, root, "crash_policy")
    tasks = [TaskSpec(name, 0.25) for name in ("a", "b")]
    devices = [
        DeviceExecutor(tasks, make_policy(spec), get_profile("pi4"), RoundClock(60.0, 0))
        for spec in ("crash", "inference-only")
    ]
    failures: list[PolicyError] = []

    def fallback(exc: PolicyError) -> Policy:
        failures.append(exc)
        return make_policy("inference-only")

    devices[0].on_policy_failure = fallback
    for now in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5):
        for device in devices:
            for task in (0, 1, 1):
                device.admit(now - 0.1, task, object())
            device.tick(now)
    assert len(failures) == 1 and "policy 'crash' failed at t = 1.250 s" in str(failures[0])
    # The failed period's arrivals were counted once, as on a device that never failed.
    failed, healthy = (d.observation(1.5).arrival_rate_per_s for d in devices)
    assert failed == healthy
    assert devices[0].alloc.microbatch == 0 and devices[0].policy.name == "inference-only"


def test_the_fleet_simulator_refuses_a_plugin_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_plugin(tmp_path, "gone-pkg", {"gone": "missing_module:Thing"}, "unused", "")
    on_path(monkeypatch, root)
    with pytest.raises(ConfigError, match=r"policy 'gone' is a plugin \(docs/plugins.md\)"):
        make_fleet_policy("gone")


SLOW = """
import time

from dartfl.policies.inference_first import InferenceFirst


class Slow(InferenceFirst):
    def decide(self, obs):
        time.sleep(0.03)
        return super().decide(obs)
"""


def test_sim_warns_of_a_policy_whose_decisions_a_device_would_wait_out(tmp_path: Path) -> None:
    root = write_plugin(tmp_path, "slow-pkg", {"slow": "slow_policy:Slow"}, "slow_policy", SLOW)
    run = _cli(
        root, "sim --workload poisson --duration-s 2 --profile pi4 --policy slow --policy dart --no-store"
    )
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if line.startswith("dartfl: warning:")]
    assert len(warnings) == 1
    assert (
        warnings[0].startswith("dartfl: warning: policy 'slow' took 3")
        and "of the 250 ms control period" in warnings[0]
    )
