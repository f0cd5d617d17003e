"""verl-dynamic: its adaptive reclaim threshold, its lend gate, and its lending in the simulator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dartfl.datacenter import DcConfig, LogNormalLengths, make_dc_policy, model_spec, simulate
from dartfl.datacenter.policies import VerlDynamic, VerlDynamicConfig
from dartfl.datacenter.types import SYNC_MODES, StepReport


def _report(**kw: float) -> StepReport:
    base: dict[str, float] = {
        "version": 5,
        "steps_left": 10,
        "batch_groups": 64,
        "minibatches": 4,
        "sampleable_groups": 0,
        "wait_s": 0.0,
        "wait_groups": 0,
        "lend_s": 0.0,
        "reclaim_s": 0.0,
        "standalone_gpus": 32,
        "trainer_gpus": 32,
    }
    base.update(kw)
    return StepReport(**base)  # type: ignore[arg-type]


def test_the_threshold_rises_once_per_idle_step_after_the_release_count() -> None:
    # verl issue 7665: ratio 0.50, step-up 0.05, release 2 gives 0.50, 0.55, 0.60 (the released
    # code added the step twice, 0.50, 0.60, 0.70).
    policy = VerlDynamic(VerlDynamicConfig(threshold=0.5))
    ratios = []
    for _ in range(3):
        policy.step_end(_report(wait_s=10.0, wait_groups=8, sampleable_groups=64))
        ratios.append(round(policy.ratio, 4))
    assert ratios == [0.5, 0.55, 0.6]


def test_calm_steps_lower_the_threshold_to_one_minibatch_and_no_further() -> None:
    policy = VerlDynamic(VerlDynamicConfig(threshold=0.3, step_down=0.1))
    for _ in range(10):
        policy.step_end(_report(sampleable_groups=64))
    assert policy.ratio == pytest.approx(0.25)  # 1 / minibatches
    assert policy.reclaim_groups(64) == 16  # and the threshold is at least one minibatch


def test_the_lend_gate_weighs_the_missing_groups_against_the_measured_switches() -> None:
    policy = VerlDynamic()
    assert policy.step_end(_report()) is True  # short of groups, nothing measured yet: lend
    assert policy.step_end(_report(sampleable_groups=64)) is False  # nothing missing
    assert policy.step_end(_report(steps_left=0)) is False  # the run is over
    # Measured: 1 s per awaited group, switches of 10 s + 4 s. 26 groups short (0.4 x 64),
    # half the GPUs lent: a benefit of 13 s < 14 s, so no lend; with 10 s per group, lend.
    cheap = VerlDynamic()
    cheap.step_end(_report(wait_s=8.0, wait_groups=8, lend_s=10.0, reclaim_s=4.0, sampleable_groups=64))
    assert cheap.step_end(_report(wait_s=1.0, wait_groups=1)) is False
    dear = VerlDynamic()
    dear.step_end(_report(wait_s=80.0, wait_groups=8, lend_s=10.0, reclaim_s=4.0, sampleable_groups=64))
    assert dear.step_end(_report(wait_s=10.0, wait_groups=1)) is True


def _config(**kw: object) -> DcConfig:
    base: dict[str, object] = {"gpus": 32, "model": model_spec("7b"), "steps": 30, "eta": 2}
    base.update(kw)
    return DcConfig(**base)  # type: ignore[arg-type]


def test_a_starved_trainer_lends_its_gpus_and_reclaims_them_with_aborted_work() -> None:
    # A small dedicated pool (0.2) leaves the trainer waiting for data: verl lends its GPUs.
    cfg = _config()
    run = simulate(cfg, make_dc_policy("verl-dynamic:0.2"), LogNormalLengths(), np.random.default_rng(1))
    assert run.booking_errors == 0
    assert run.switches >= 4 and run.gpus_moved >= 4 * 24
    assert max(run.series["hybrid_gpus"]) > 0  # the trainer's GPUs did roll out
    assert run.recompute_gpu_s > 0 and run.aborted_samples > 0  # reclaims abort in-flight work
    assert max(run.staleness_counts) <= cfg.eta
    assert run.steps == cfg.steps
    assert run.generated_samples == (
        run.trained_samples + run.dropped_samples + run.buffered_samples + run.inflight_samples
    )


def test_a_trainer_that_is_the_bottleneck_never_lends_and_runs_as_its_static_split() -> None:
    cfg = _config()
    lengths = LogNormalLengths(median_tokens=256.0)
    verl = simulate(cfg, make_dc_policy("verl-dynamic:0.8"), lengths, np.random.default_rng(2))
    static = simulate(cfg, make_dc_policy("static:0.8"), lengths, np.random.default_rng(2))
    assert verl.switches == 0
    assert verl.makespan_s == pytest.approx(static.makespan_s)


def test_lending_pays_off_when_rollout_starves_the_trainer() -> None:
    cfg = replace(_config(), steps=40)
    lengths = LogNormalLengths()
    # a fifth of the GPUs roll out: the trainer idles two thirds of the time at static:0.2
    verl = simulate(cfg, make_dc_policy("verl-dynamic:0.2"), lengths, np.random.default_rng(3))
    static = simulate(cfg, make_dc_policy("static:0.2"), lengths, np.random.default_rng(3))
    assert verl.makespan_s < 0.97 * static.makespan_s


@pytest.mark.parametrize("sync_mode", SYNC_MODES)
def test_a_lent_trainer_reclaims_its_gpus_when_stale_groups_fill_the_buffer(sync_mode: str) -> None:
    # With overlapped weight syncs every run stalled on its last step: the lent trainer waited
    # for a threshold of sampleable groups while groups past the bound filled the buffer and
    # held every admission, so nothing new was generated (the trainer drops them only when it
    # starts a step). It spun for a minute and blamed the inputs' size.
    cfg = _config(steps=40, sync_mode=sync_mode)
    run = simulate(cfg, make_dc_policy("verl-dynamic:0.2"), LogNormalLengths(), np.random.default_rng(1))
    assert run.steps == cfg.steps
    assert run.switches > 0  # it did lend
    assert run.generated_samples == (
        run.trained_samples + run.dropped_samples + run.buffered_samples + run.inflight_samples
    )
    assert max(run.staleness_counts) <= cfg.eta
