"""Agentic multi-turn episodes: tool waits, growing contexts, KV kept or evicted, the books."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dartfl.datacenter import DcConfig, make_dc_policy, model_spec, simulate
from dartfl.datacenter.agentic_pool import AgenticPool
from dartfl.datacenter.policies import StaticSplit
from dartfl.datacenter.types import DcObservation
from dartfl.datacenter.workload import WORKLOADS, AgenticWorkload, LatencyClass

FAST = (LatencyClass(1.0, 1e-6, 0.0),)  # tools that answer at once
SLOW = (LatencyClass(1.0, 8.0, 0.0),)


def _config(**kw: object) -> DcConfig:
    base: dict[str, object] = {
        "gpus": 16,
        "model": model_spec("7b"),
        "steps": 12,
        "eta": 2,
        "prompt_tokens": 512,
    }
    base.update(kw)
    return DcConfig(**base)  # type: ignore[arg-type]


class _Watch(StaticSplit):
    """A static split that keeps the last observation that saw finished episodes."""

    def __init__(self, fraction: float) -> None:
        super().__init__(fraction)
        self.seen: DcObservation | None = None

    def update(self, obs: DcObservation) -> None:
        if obs.mean_response_tokens > 0:
            self.seen = obs


def test_an_episode_grows_its_context_by_every_turn_and_tool_output() -> None:
    w = AgenticWorkload(calls_start=3.0, calls_end=3.0, calls_shape=1e6, latency=FAST)
    pool = AgenticPool(w, model_spec("7b"), prompt_tokens=100, group_size=2)
    rng = np.random.default_rng(0)
    pool.admit(rng, 4, version=0, progress=0.0)
    groups, extra, prefill, wait = 0, 0.0, 0.0, 0.0
    for step in range(20_000):
        for f in pool.advance(rng, tokens_per_s=50.0, dt=0.5, now=0.5 * step, engines=1).values():
            groups, extra, prefill, wait = (
                groups + f.groups,
                extra + f.extra_tokens,
                prefill + f.prefill_tokens,
                wait + f.wait_s,
            )
        if not pool.inflight_groups:
            break
    assert groups == 4 and pool.inflight_samples == 0
    # every sample called its tool 3 times and read each output back into its context, so
    # it prefilled its prompt and the three outputs (its KV was kept through the waits)
    assert extra / 8 > 3 * 20
    assert prefill / 8 == pytest.approx(100 + extra / 8)
    assert wait > 0


def test_tool_waits_slow_rollout_and_are_measured_per_sample() -> None:
    fast = AgenticWorkload(calls_start=4.0, calls_end=4.0, latency=FAST)
    slow = replace(fast, latency=SLOW)
    cfg = _config()
    watch_fast, watch_slow = _Watch(0.5), _Watch(0.5)
    a = simulate(cfg, watch_fast, fast, np.random.default_rng(1))
    b = simulate(cfg, watch_slow, slow, np.random.default_rng(1))
    assert b.makespan_s > a.makespan_s
    assert watch_fast.seen is not None and watch_slow.seen is not None
    assert watch_fast.seen.mean_env_wait_s < 0.01 < 10.0 < watch_slow.seen.mean_env_wait_s
    assert watch_slow.seen.multi_turn and 0.0 < watch_slow.seen.running_share <= 1.0


def test_evicting_kv_during_a_tool_call_recomputes_the_context_on_resume() -> None:
    keep = AgenticWorkload(calls_start=4.0, calls_end=4.0, latency=SLOW, kv="keep")
    evict = replace(keep, kv="evict")
    cfg = _config()
    w_keep, w_evict = _Watch(0.5), _Watch(0.5)
    simulate(cfg, w_keep, keep, np.random.default_rng(2))
    simulate(cfg, w_evict, evict, np.random.default_rng(2))
    assert w_keep.seen is not None and w_evict.seen is not None
    assert not w_evict.seen.kv_kept
    # kept: prompt + tool outputs; evicted: every resume prefills the whole context again
    assert w_evict.seen.mean_prefill_tokens > 2 * w_keep.seen.mean_prefill_tokens


def test_a_short_tool_call_is_not_rounded_up_to_the_simulator_tick() -> None:
    # Six 50 ms tool calls between turns of about a second: turn ends and tool returns inside
    # a tick are interpolated, so a 1 s tick gives the makespan of a 0.1 s one (rounding each
    # event up to the tick would add about a second per call, +80%). Draws differ between the
    # two, hence the tolerance.
    w = AgenticWorkload(
        calls_start=6.0,
        calls_end=6.0,
        calls_shape=1e6,
        turn_median_tokens=32.0,
        turn_sigma=0.0,
        output_median_tokens=16.0,
        output_sigma=0.0,
        latency=(LatencyClass(1.0, 0.05, 0.0),),
    )
    # a rollout-bound split (2 of 16 GPUs roll out), so the episodes' time is the makespan's
    coarse = simulate(_config(tick_s=1.0), StaticSplit(0.125), w, np.random.default_rng(3))
    fine = simulate(_config(tick_s=0.1), StaticSplit(0.125), w, np.random.default_rng(3))
    assert coarse.makespan_s == pytest.approx(fine.makespan_s, rel=0.1)


@pytest.mark.parametrize("spec", ["sync", "static:0.5", "verl-dynamic:0.3", "dart"])
def test_agentic_books_balance_and_no_sample_is_past_the_bound(spec: str) -> None:
    cfg = _config(eta=1)
    run = simulate(cfg, make_dc_policy(spec), WORKLOADS["agentic"].build(), np.random.default_rng(4))
    assert run.booking_errors == 0 and run.steps == cfg.steps
    assert max(run.staleness_counts) <= run.eta
    assert run.generated_samples == (
        run.trained_samples + run.dropped_samples + run.buffered_samples + run.inflight_samples
    )


def test_dart_on_an_agentic_workload_stays_near_the_best_static_split() -> None:
    # DART's rate model counts the tool waits (a waiting episode holds its slot) and the tool
    # outputs the trainer runs through; without them it gave rollout far too many GPUs
    # (0.67x the best static split on agentic-swe, 169 switches).
    w = WORKLOADS["agentic"]
    cfg = _config(gpus=32, steps=30, prompt_tokens=w.prompt_tokens)
    best = max(
        simulate(cfg, StaticSplit(f), w.build(), np.random.default_rng(5)).summary()["samples_per_s"]  # type: ignore[type-var]
        for f in (0.4, 0.5, 0.6)
    )
    dart = simulate(cfg, make_dc_policy("dart"), w.build(), np.random.default_rng(5)).summary()
    assert float(dart["samples_per_s"]) >= 0.95 * float(best)  # type: ignore[arg-type]


@pytest.mark.slow
def test_dart_on_a_small_agentic_swe_cluster_keeps_the_trainer_its_gpus() -> None:
    # On 16 GPUs the trainer has a few GPUs and a step lasts minutes, longer than the window
    # DART read its rate over: it read training 4.6x faster than it was, moved the trainer's
    # GPUs to rollout (13 of 16) and made 0.66x of static:0.5's samples/s.
    w = WORKLOADS["agentic-swe"]
    cfg = _config(gpus=16, steps=200, prompt_tokens=w.prompt_tokens)
    static = simulate(cfg, StaticSplit(0.5), w.build(), np.random.default_rng(1)).summary()
    dart = simulate(cfg, make_dc_policy("dart"), w.build(), np.random.default_rng(1)).summary()
    assert float(dart["samples_per_s"]) >= 0.98 * float(static["samples_per_s"])  # type: ignore[arg-type]
    assert float(dart["rollout_gpu_fraction"]) < 0.6  # type: ignore[arg-type]
