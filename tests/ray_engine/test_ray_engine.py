"""The Ray engine: its books and batch sharding (fast), and end to end on 3 workers
(integration: run inside scripts/loopback-run)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dartfl.cli.dc_cmd import CONTRACT_KEYS, plot_dc
from dartfl.errors import ConfigError
from ray_engine import RayRun, RayRunConfig, run_ray
from ray_engine.books import shards


def _group(length: int, version: int = 0, n: int = 4) -> dict[str, Any]:
    return {
        "tokens": np.zeros((n, length), dtype=np.int64),
        "reward": np.full(n, 0.5),
        "version": version,
        "wait_s": 0.0,
    }


def test_the_books_count_trained_response_tokens_and_staleness() -> None:
    run = RayRun("dart", eta=2, group_size=4)
    run.trained([_group(3, version=1), _group(5, version=2)], version=3)
    run.record(0.5, rollout=1, train=2, switching=0, buffer_groups=7.0)
    run.wall_s = 2.0
    summary = run.summary()
    assert set(summary) >= set(CONTRACT_KEYS)
    assert summary["samples_per_s"] == pytest.approx(8 / 2.0)
    assert summary["tokens_per_s"] == pytest.approx((4 * 3 + 4 * 5) / 2.0)
    assert summary["staleness_max"] == 2 and summary["staleness_mean"] == pytest.approx(1.5)
    assert run.series["staleness_max"] == [2.0] and run.series["reward"] == [0.5]


def test_shards_balance_tokens_so_a_long_group_gets_a_shard_to_itself() -> None:
    batch = [_group(24), *[_group(3) for _ in range(8)]]
    parts = shards(batch, 2)
    loads = sorted(sum(g["tokens"].size for g in p) for p in parts)
    assert loads == [4 * 24, 4 * 3 * 8]
    assert len(shards(batch[:1], 3)) == 1  # no empty shards


def test_a_group_carries_the_version_that_decoded_its_last_token() -> None:
    # The worker loads new weights between slices and its sequences continue under them, so
    # a group's staleness is counted from its newest token (AReaL's tail staleness), not from
    # the version it started under: an episode spanning weight updates is not dropped for the
    # age of its first turn. The actor's class runs here without Ray.
    from ray_engine.actors import Worker

    worker = Worker.__ray_actor_class__(seed=1, group_size=2, task="sort")  # type: ignore[attr-defined]
    weights = {k: v.clone() for k, v in worker.model.state_dict().items()}
    first = worker.run_steps(weights, 0, 1, [], 1)  # one token of one prompt under version 0
    assert first.groups == [] and first.active == 1  # prompts have two digits at least
    rest = worker.run_steps(weights, 1, 0, [], 100)  # the rest under version 1
    assert [g["version"] for g in rest.groups] == [1]


def test_unknown_policies_and_bad_configs_are_refused_before_ray_starts() -> None:
    with pytest.raises(ConfigError, match=r"(?s)unknown Ray engine policy 'greedy'.*static:F"):
        run_ray(RayRunConfig(), ["greedy"])
    with pytest.raises(ConfigError, match="one-step"):
        run_ray(RayRunConfig(), ["one-step"])  # the simulator has it, the Ray engine does not
    with pytest.raises(ConfigError, match="fraction"):
        run_ray(RayRunConfig(), ["static:1.5"])
    with pytest.raises(ConfigError, match=r"unknown key 'smooth'; valid: kappa, hysteresis, hold$"):
        run_ray(RayRunConfig(), ["dart:smooth=0.5"])  # a knob the Ray controller lacks
    with pytest.raises(ConfigError, match="--workers"):
        RayRunConfig(workers=1)


@pytest.mark.integration
def test_ray_engine_switches_roles_learns_and_respects_the_staleness_bound(tmp_path: Path) -> None:
    # A training-heavy workload (8 samples per prompt) started with two of three workers
    # rolling out: the staleness bound caps what may be in flight at about one batch
    # whoever rolls out, so the second rollout worker adds nothing while the lone trainer
    # is the bottleneck (about half the throughput of two). DART should move it to training.
    cfg = RayRunConfig(workers=3, eta=2, steps=20, group_size=8, seed=1, dart_start_rollout=2)
    (run,) = run_ray(cfg, ["dart"])
    dart = run.summary()
    assert dart["steps"] == 20
    assert dart["switches"] >= 1
    assert len(dart["role_layouts"]) >= 2  # the allocator moved a worker between roles
    assert 1.0 in run.series["rollout_gpus"]  # ... and the move landed
    assert dart["staleness_max"] <= cfg.eta  # no sample past the bound was trained on
    curve = dart["reward_curve"]
    assert np.mean(curve[-5:]) > np.mean(curve[:3])  # reward rises over its first values
    assert dart["samples_per_s"] > 0
    assert math.isfinite(dart["tokens_per_s"]) and dart["tokens_per_s"] > 0
    png = plot_dc([run], tmp_path / "dc-run.png", time_unit="s", resource="workers", rewards=True)
    assert png.stat().st_size > 1000


def test_lending_books_the_trainers_wait_and_reclaims_at_the_policys_threshold() -> None:
    from dartfl.datacenter.policies import VerlDynamic, VerlDynamicConfig
    from ray_engine.lending import RayLending

    lending = RayLending(VerlDynamic(VerlDynamicConfig(threshold=0.5)), steps=10, batch_groups=12)
    lending.waiting(1.0, started=False, sampleable=4)  # the trainer holds its workers, 8 short
    lending.waiting(3.5, started=True, sampleable=12)
    assert lending.step_wait_s == pytest.approx(2.5) and lending.step_wait_groups == 8
    assert lending.step_ended(version=1, sampleable=2, standalone=2, trainers=1)  # short: lend
    assert lending.step_wait_s == 0.0  # the report consumed the step's books
    lending.lend([2])
    assert not lending.should_reclaim(5) and lending.should_reclaim(6)  # 0.5 x 12 groups
    assert lending.reclaimed() == [2] and not lending.lent
    assert lending.last_reclaim_s == pytest.approx(0.3 * 3.3 / 9.1)


@pytest.mark.integration
def test_ray_multi_turn_task_under_verl_dynamic_and_dart_respects_the_bound() -> None:
    # Episodes of the tools task wait for the checker between turns of two digits; verl-dynamic
    # lends its trainer worker when the buffer is short, and DART starts from a layout that
    # counts the tool waits (two rollout workers of three).
    cfg = RayRunConfig(workers=3, eta=2, steps=10, seed=2, task="tools")
    verl, dart = run_ray(cfg, ["verl-dynamic", "dart"])
    for run in (verl, dart):
        s = run.summary()
        assert s["steps"] == 10 and s["staleness_max"] <= cfg.eta
        assert s["samples_per_s"] > 0 and math.isfinite(s["idle_gpu_s"])
        assert max(len(g) for g in s["role_layouts"]) > 0
    assert any(layout.count("rollout") == 2 for layout in dart.layouts)
