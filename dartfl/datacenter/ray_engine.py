"""The real engine of the datacenter mode: Ray actors whose role the allocator switches.

Ray and PyTorch are imported inside functions only (the core stays importable without them).
Run it inside a loopback-only network namespace (scripts/loopback-run): Ray probes outside
addresses at start-up.

- Worker actors (`ray_actors`) are long-lived. Each holds a copy of the policy and a role,
  `rollout` or `train`; the driver switches roles at run time.
- An experience-queue actor keeps groups with their version tags, applies AReaL's admission
  rule and hands the trainer the oldest groups, dropping any past the bound.
- Weights go through the object store: the driver `ray.put`s each new version once, and
  every worker fetches it by reference.
- The task and the policy model are in `ray_task`; the asynchronous loop in `ray_async`;
  DART's split decision in `ray_controller`.

Every policy gets fresh workers that are warmed up (and profiled) before its clock starts,
so process start-up and the previous policy's teardown are timed for none of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.datacenter.ray_actors import SLOTS, SWITCH_S, queue_class, worker_class
from dartfl.datacenter.ray_controller import MeasuredRates, RaySplitController
from dartfl.datacenter.ray_task import make_policy_model, prompt_lengths
from dartfl.errors import ConfigError

__all__ = ["RAY_CPUS", "SERIES_KEYS", "RayRun", "RayRunConfig", "run_ray"]

RAY_CPUS = 2  # the development machine's cores
# Time series per control period; the first six match the simulator's, so `plot_dc` draws both.
SERIES_KEYS = (
    "t_s",
    "rollout_gpus",
    "train_gpus",
    "switching_gpus",
    "buffer_groups",
    "staleness_max",
    "reward",
)


@dataclass(frozen=True)
class RayRunConfig:
    workers: int = 3
    eta: int = 2
    steps: int = 30
    batch_groups: int = 12
    group_size: int = 4
    period_s: float = 0.25  # control period: DART decides and the series is sampled
    seed: int = 1
    lr: float = 0.01
    dart_start_rollout: int | None = None  # DART's first layout (default: from the warm-up profile)

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise ConfigError(f"--workers must be >= 2 (one rollout, one trainer), got {self.workers}")
        if self.workers > 100 * RAY_CPUS:
            raise ConfigError(f"--workers must be <= {100 * RAY_CPUS} on {RAY_CPUS} CPUs, got {self.workers}")
        if self.eta < 0 or self.steps < 1:
            raise ConfigError(f"--eta must be >= 0 and --steps >= 1, got {self.eta}, {self.steps}")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ConfigError(f"period_s must be a finite number > 0, got {self.period_s}")


@dataclass
class RayRun:
    """The books of one policy's run: `summary()` gives the CLI's JSON; `series` (one row per
    control period) and `reward_curve` feed `plot_dc`."""

    policy: str
    eta: int
    rewards: list[float] = field(default_factory=list)  # mean reward of each trained batch
    staleness: list[int] = field(default_factory=list)  # of every trained group
    last_staleness: int = 0  # most stale group of the last batch
    trained_samples: int = 0
    trained_tokens: int = 0  # response tokens of the trained samples
    layouts: set[str] = field(default_factory=set)
    switches: int = 0
    migrated: int = 0  # sequences a switching worker handed to the other rollout workers
    dropped_groups: int = 0  # past the staleness bound when their turn came
    busy_s: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "train": 0.0})
    role_s: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "train": 0.0, "switching": 0.0})
    wall_s: float = 0.0
    group_size: int = 1
    series: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in SERIES_KEYS})

    @property
    def reward_curve(self) -> list[float]:
        return self.rewards

    def trained(self, batch: list[dict[str, Any]], version: int) -> None:
        """Book one training step on `batch` at policy version `version`."""
        self.rewards.append(float(np.mean([g["reward"].mean() for g in batch])))
        staleness = [version - g["version"] for g in batch]
        self.staleness += staleness
        self.last_staleness = max(staleness)
        self.trained_samples += sum(g["tokens"].shape[0] for g in batch)
        self.trained_tokens += sum(g["tokens"].size for g in batch)

    def record(self, t_s: float, rollout: int, train: int, switching: int, buffer_groups: float) -> None:
        """One row of the time series; staleness and reward are those of the last trained batch."""
        for key, value in (
            ("t_s", t_s),
            ("rollout_gpus", rollout),
            ("train_gpus", train),
            ("switching_gpus", switching),
            ("buffer_groups", buffer_groups),
            ("staleness_max", self.last_staleness),
            ("reward", self.rewards[-1] if self.rewards else 0.0),
        ):
            self.series[key].append(float(value))

    def summary(self) -> dict[str, Any]:
        wall = max(self.wall_s, 1e-9)
        rewards = self.rewards
        return {
            "policy": self.policy,
            "samples_per_s": self.trained_samples / wall,
            "tokens_per_s": self.trained_tokens / wall,
            "steps": len(rewards),
            "rollout_idle_ratio": _idle(self.busy_s["rollout"], self.role_s["rollout"]),
            "trainer_idle_ratio": _idle(self.busy_s["train"], self.role_s["train"]),
            "staleness_max": max(self.staleness, default=0),
            "staleness_mean": float(np.mean(self.staleness)) if self.staleness else 0.0,
            "dropped_samples": self.dropped_groups * self.group_size,
            "switches": self.switches,
            "migrated_sequences": self.migrated,
            "reward_curve": rewards,
            "reward_first": rewards[0] if rewards else 0.0,
            "reward_last5": float(np.mean(rewards[-5:])) if rewards else 0.0,
            "role_layouts": sorted(self.layouts),
            "wall_s": self.wall_s,
        }


def _idle(busy_s: float, allocated_s: float) -> float:
    return min(1.0, max(0.0, 1.0 - busy_s / allocated_s)) if allocated_s > 0 else 0.0


def run_ray(config: RayRunConfig, specs: list[str]) -> list[RayRun]:
    """Run each policy (`sync`, `static:F`, `dart`) for real on one Ray cluster."""
    for spec in specs:
        _rollout_share(spec)  # fail fast on a bad name, before Ray starts
    import ray

    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        return [_run_policy(ray, config, spec) for spec in specs]
    finally:
        ray.shutdown()


def _rollout_share(spec: str) -> float | None:
    """The fixed rollout share of `static:F`; None for `sync` and `dart`."""
    if spec in ("sync", "dart"):
        return None
    if spec.startswith("static:"):
        try:
            share = float(spec.split(":", 1)[1])
        except ValueError:
            share = math.nan
        if 0.0 < share < 1.0:
            return share
    raise ConfigError(f"unknown policy {spec!r} for the Ray engine; valid: sync, static:F (0 < F < 1), dart")


def _run_policy(ray: Any, cfg: RayRunConfig, spec: str) -> RayRun:
    import torch

    from dartfl.datacenter.ray_async import AsyncRun  # it imports this module

    torch.manual_seed(cfg.seed)
    learner = Learner(ray, torch, cfg.lr)
    cpus = math.floor(100 * RAY_CPUS / cfg.workers) / 100  # fits the cluster exactly
    worker_cls = worker_class(ray, torch).options(num_cpus=min(0.5, cpus))
    workers = [worker_cls.remote(cfg.seed * 100 + i, cfg.group_size) for i in range(cfg.workers)]
    actors = list(workers)
    try:
        profiles = ray.get([w.warm_up.remote() for w in workers])
        if spec == "sync":
            run = RayRun(spec, 0, group_size=cfg.group_size)
            _run_sync(ray, cfg, workers, learner, run)
            return run
        queue = queue_class(ray).remote(cfg.batch_groups, cfg.eta)
        actors.append(queue)
        run = RayRun(spec, cfg.eta, group_size=cfg.group_size)
        rates, controller, first = _plan_async(cfg, spec, profiles)
        AsyncRun(ray, cfg, workers, queue, learner, run, rates, controller, first).run()
        return run
    finally:
        for actor in actors:
            ray.kill(actor)


def _plan_async(
    cfg: RayRunConfig, spec: str, profiles: list[tuple[float, float]]
) -> tuple[MeasuredRates, RaySplitController | None, int]:
    """The rates to start from (the warm-up profile), DART's controller (None for a static
    split) and the first layout's rollout worker count."""
    # the prompt set's length profile stands in for lengths measured in earlier steps
    expected_length = float(np.mean(prompt_lengths(np.random.default_rng(cfg.seed), 1000)))
    rates = MeasuredRates(
        decode_step_s=float(np.median([p[0] for p in profiles])),
        train_token_s=float(np.median([p[1] for p in profiles])),
        mean_length=expected_length,
    )
    controller = RaySplitController(cfg.workers, cfg.batch_groups, cfg.group_size, cfg.eta, SLOTS, SWITCH_S)
    share = _rollout_share(spec)
    if share is not None:
        first = round(share * cfg.workers)
    elif cfg.dart_start_rollout is not None:
        first = cfg.dart_start_rollout
    else:
        first = controller.first_layout(rates)
    return rates, (controller if spec == "dart" else None), min(cfg.workers - 1, max(1, first))


class Learner:
    """The driver's copy of the policy: averages the shards' gradients into an Adam step and
    publishes each new version to the object store once."""

    def __init__(self, ray: Any, torch: Any, lr: float) -> None:
        self.ray, self.torch = ray, torch
        self.model = make_policy_model(torch)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.weights = self._publish()

    def _publish(self) -> Any:
        return self.ray.put({k: v.clone() for k, v in self.model.state_dict().items()})

    def apply(self, grads: list[list[np.ndarray]]) -> None:
        self.opt.zero_grad()
        for i, p in enumerate(self.model.parameters()):
            p.grad = self.torch.as_tensor(np.mean([g[i] for g in grads], axis=0))
        self.opt.step()
        self.weights = self._publish()


def shards(batch: list[dict[str, Any]], k: int) -> list[list[dict[str, Any]]]:
    """Split a batch over k trainers, balancing tokens (longest group first to the least
    loaded shard): a step lasts as long as its largest shard, and lengths are heavy-tailed."""
    parts: list[list[dict[str, Any]]] = [[] for _ in range(k)]
    load = [0] * k
    for group in sorted(batch, key=lambda g: -g["tokens"].size):
        i = load.index(min(load))
        parts[i].append(group)
        load[i] += group["tokens"].size
    return [p for p in parts if p]


def _run_sync(ray: Any, cfg: RayRunConfig, workers: list[Any], learner: Learner, run: RayRun) -> None:
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
