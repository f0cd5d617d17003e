"""The real engine's entry point: one Ray session, each policy on fresh warmed-up workers.

- Worker actors (`ray_engine.actors`) are long-lived. Each holds a copy of the policy and a
  role, `rollout` or `train`; the driver switches roles at run time.
- An experience-queue actor keeps groups with their version tags, applies AReaL's admission
  rule and hands the trainer the oldest groups, dropping any past the bound.
- Weights go through the object store: the driver `ray.put`s each new version once, and
  every worker fetches it by reference.
- `sync` runs here; `static:F`, `dart` and `verl-dynamic` run the asynchronous loop
  (`ray_engine.async_loop`). Policies are the datacenter registry's Ray subset
  (dartfl.datacenter.policies.RAY_POLICIES); DART's split decision and the rate estimates
  are the pure core's (dartfl.datacenter.worker_split).

Every policy gets fresh workers that are warmed up (and profiled) before its clock starts,
so process start-up and the previous policy's teardown are timed for none of them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import ray
import torch

from dartfl.datacenter.policies import RAY_POLICIES, Colocated, DcDartPolicy, StaticSplit, VerlDynamic
from dartfl.datacenter.worker_split import MeasuredRates, WorkerSplitController
from ray_engine.actors import SLOTS, SWITCH_S, ExperienceQueue, Worker
from ray_engine.async_loop import AsyncRun
from ray_engine.books import RAY_CPUS, RayRun, RayRunConfig, check_specs, shards
from ray_engine.task import expected_wait_s, make_policy_model, prompt_lengths

__all__ = ["Learner", "run_ray"]


def run_ray(config: RayRunConfig, specs: list[str]) -> list[RayRun]:
    """Run each policy (`sync`, `static:F`, `dart`, `verl-dynamic[:F]`) for real on one Ray cluster."""
    check_specs(specs)  # fail fast on a bad spec, before Ray starts
    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        return [_run_policy(config, spec) for spec in specs]
    finally:
        ray.shutdown()


class Learner:
    """The driver's copy of the policy: averages the shards' gradients into an Adam step and
    publishes each new version to the object store once."""

    def __init__(self, lr: float) -> None:
        self.model = make_policy_model()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.weights = self._publish()

    def _publish(self) -> Any:
        return ray.put({k: v.clone() for k, v in self.model.state_dict().items()})

    def apply(self, grads: list[list[np.ndarray]]) -> None:
        self.opt.zero_grad()
        for i, p in enumerate(self.model.parameters()):
            p.grad = torch.as_tensor(np.mean([g[i] for g in grads], axis=0))
        self.opt.step()
        self.weights = self._publish()


def _run_policy(cfg: RayRunConfig, spec: str) -> RayRun:
    policy = RAY_POLICIES.build(spec)
    torch.manual_seed(cfg.seed)
    learner = Learner(cfg.lr)
    cpus = math.floor(100 * RAY_CPUS / cfg.workers) / 100  # fits the cluster exactly
    worker_cls = Worker.options(num_cpus=min(0.5, cpus))
    workers = [worker_cls.remote(cfg.seed * 100 + i, cfg.group_size, cfg.task) for i in range(cfg.workers)]
    actors = list(workers)
    try:
        profiles = ray.get([w.warm_up.remote() for w in workers])
        if isinstance(policy, Colocated):
            run = RayRun(spec, 0, group_size=cfg.group_size)
            _run_sync(cfg, workers, learner, run)
            return run
        queue = ExperienceQueue.remote(cfg.batch_groups, cfg.eta)
        actors.append(queue)
        run = RayRun(spec, cfg.eta, group_size=cfg.group_size)
        rates, controller, first = _plan_async(cfg, spec, policy, profiles)
        lending = policy if isinstance(policy, VerlDynamic) else None
        AsyncRun(cfg, workers, queue, learner, run, rates, controller, first, lending).run()
        return run
    finally:
        for actor in actors:
            ray.kill(actor)


def _plan_async(
    cfg: RayRunConfig, spec: str, policy: Any, profiles: list[tuple[float, float]]
) -> tuple[MeasuredRates, WorkerSplitController | None, int]:
    """The rates to start from (the warm-up profile), DART's controller (None for a fixed
    split) and the first layout's rollout worker count."""
    # the prompt set's length profile stands in for lengths measured in earlier steps
    expected_length = float(np.mean(prompt_lengths(np.random.default_rng(cfg.seed), 1000)))
    rates = MeasuredRates(
        decode_step_s=float(np.median([p[0] for p in profiles])),
        train_token_s=float(np.median([p[1] for p in profiles])),
        mean_length=expected_length,
        wait_s=expected_wait_s(np.random.default_rng(cfg.seed), cfg.task),
    )
    _, knobs = RAY_POLICIES.parse(spec)
    controller = WorkerSplitController(
        cfg.workers,
        cfg.batch_groups,
        cfg.group_size,
        cfg.eta,
        SLOTS,
        SWITCH_S,
        **_controller_knobs(knobs, cfg.period_s),
    )
    if isinstance(policy, StaticSplit | VerlDynamic):
        share = policy.fraction if isinstance(policy, StaticSplit) else policy.config.fraction
        first = round(share * cfg.workers)
    elif cfg.dart_start_rollout is not None:
        first = cfg.dart_start_rollout
    else:
        first = controller.first_layout(rates)
    dart = controller if isinstance(policy, DcDartPolicy) else None
    return rates, dart, min(cfg.workers - 1, max(1, first))


def _controller_knobs(knobs: dict[str, Any], period_s: float) -> dict[str, float]:
    """DART's spec knobs in the worker controller's terms (hold is in control periods)."""
    out: dict[str, float] = {}
    if "kappa" in knobs:
        out["kappa"] = knobs["kappa"]
    if "hysteresis" in knobs:
        out["hysteresis"] = knobs["hysteresis"]
    if "hold_periods" in knobs:
        out["hold_s"] = knobs["hold_periods"] * period_s
    return out


def _run_sync(cfg: RayRunConfig, workers: list[Any], learner: Learner, run: RayRun) -> None:
    """Colocated and synchronous: every worker rolls out its share of the batch with the
    current weights, waits for the last sequence, then every worker trains on the batch.
    No switch cost is charged between the phases (a generous model of colocation)."""
    w = len(workers)
    grants = [cfg.batch_groups // w + (1 if i < cfg.batch_groups % w else 0) for i in range(w)]
    run.layouts.add("colocated")
    start = time.perf_counter()
    for version in range(cfg.steps):
        rollout_start = time.perf_counter()
        run.record(rollout_start - start, w, 0, 0, 0.0)
        slices = ray.get(
            [
                wk.run_steps.remote(learner.weights, version, g, [], 1 << 30)
                for wk, g in zip(workers, grants, strict=True)
            ]
        )
        batch = [g for s in slices for g in s.groups]
        train_start = time.perf_counter()
        run.busy_s["rollout"] += sum(s.busy_s for s in slices)
        run.role_s["rollout"] += w * (train_start - rollout_start)
        run.record(train_start - start, 0, w, 0, float(len(batch)))
        parts = shards(batch, w)
        results = ray.get(
            [wk.gradients.remote(learner.weights, version, p) for wk, p in zip(workers, parts, strict=False)]
        )
        learner.apply([r.grads for r in results])
        run.trained(batch, version)
        run.busy_s["train"] += sum(r.busy_s for r in results)
        run.role_s["train"] += w * (time.perf_counter() - train_start)
    run.wall_s = time.perf_counter() - start
    run.record(run.wall_s, w, 0, 0, 0.0)
