"""The real engine of the datacenter mode: Ray actors whose role the allocator switches.

Ray and PyTorch are imported inside functions only (the core stays importable without them).
Run it inside a loopback-only network namespace (scripts/loopback-run): Ray probes outside
addresses at start-up.

- Worker actors are long-lived. Each holds a copy of the policy and a role, `rollout` or
  `train`; the driver switches roles at run time (a switch reloads the weights: dead time).
- An experience-queue actor keeps groups with their version tags, applies AReaL's admission
  rule `(eta + version + 1) * B - (accepted + running)` and hands the trainer the oldest
  groups, dropping any past the bound.
- Weights go through the object store: the driver `ray.put`s each new version once, and
  every rollout worker fetches it by reference.
- The task: copy a digit sequence in sorted order. Lengths vary widely (2 to 24 digits,
  heavy-tailed), the reward is verifiable (share of positions right). The policy is a small
  autoregressive MLP trained with a group-relative policy gradient (GRPO-style advantages).
  Each decode step and each trained token also waits a fixed time that stands in for an
  accelerator's step latency, so the throughput measured reflects scheduling (tails,
  overlap, switches), not the two CPU cores of this machine.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.errors import ConfigError

__all__ = ["RayRunConfig", "run_ray"]

MAX_DIGITS = 24
DECODE_STEP_S = 0.01  # emulated accelerator latency of one decode step (whole batch)
TRAIN_TOKEN_S = 0.00025  # emulated accelerator time per trained token
SWITCH_S = 0.3  # dead time of a role switch
SLOTS = 12  # prompts one rollout worker decodes at once (its KV-cache budget)
SLICE_STEPS = 8  # decode steps per call, so the driver can admit, sync and switch between slices


@dataclass(frozen=True)
class RayRunConfig:
    workers: int = 3
    eta: int = 2
    steps: int = 30
    batch_groups: int = 12
    group_size: int = 4
    period_s: float = 0.5
    seed: int = 1
    lr: float = 0.01
    dart_start_rollout: int | None = None  # DART's first layout (default: all but one roll out)

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise ConfigError(f"--workers must be >= 2 (one rollout, one trainer), got {self.workers}")
        if self.eta < 0 or self.steps < 1:
            raise ConfigError(f"--eta must be >= 0 and --steps >= 1, got {self.eta}, {self.steps}")


def _lengths(rng: np.random.Generator, k: int) -> list[int]:
    """Heavy-tailed lengths in [2, MAX_DIGITS]: most prompts short, a few long."""
    raw = 2 + rng.pareto(1.3, size=k) * 3
    return [int(min(MAX_DIGITS, x)) for x in raw]


def _features(torch: Any, digits: Any, prev: Any, pos: int, length: int) -> Any:
    """Input of one decode step: digit counts, previous token, position, length (one-hot)."""
    n = prev.shape[0]
    counts = torch.bincount(digits, minlength=10).float().repeat(n, 1) / MAX_DIGITS
    prev_1h = torch.nn.functional.one_hot(prev, 11).float()
    pos_1h = torch.zeros(n, MAX_DIGITS + 1)
    pos_1h[:, pos] = 1.0
    frac = torch.full((n, 1), pos / max(1, length))
    return torch.cat([counts, prev_1h, pos_1h, frac], dim=1)


def _make_model(torch: Any) -> Any:
    width = 10 + 11 + MAX_DIGITS + 1 + 1
    return torch.nn.Sequential(
        torch.nn.Linear(width, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def _worker_class() -> Any:
    import ray
    import torch

    @ray.remote(num_cpus=0.5)
    class Worker:
        """A long-lived actor that rolls out or computes gradients, as its role says."""

        def __init__(self, seed: int) -> None:
            torch.set_num_threads(1)
            torch.manual_seed(seed)
            self.model = _make_model(torch)
            self.version = -1
            self.role = "rollout"
            self.rng = np.random.default_rng(seed)
            self.active: list[dict[str, Any]] = []

        def set_role(self, role: str) -> int:
            """Switch role (dead time: reload weights, build the other side); returns abandoned groups."""
            time.sleep(SWITCH_S)
            self.role = role
            abandoned = len(self.active)
            self.active = []
            return abandoned

        def _load(self, weights: Any, version: int) -> None:
            if version != self.version:
                self.model.load_state_dict(weights)
                self.version = version

        def run_steps(
            self, weights: Any, version: int, admit: int, n: int, steps: int
        ) -> tuple[list[Any], int]:
            """Continuous batching: admit new prompts, decode `steps` steps (or until idle).

            In-flight sequences persist between calls; a new weight version is loaded at once
            and the sequences continue under it (their tag stays the version they started with).
            Returns the groups that finished and how many are still in flight.
            """
            self._load(weights, version)
            for length in _lengths(self.rng, admit):
                p = self.rng.integers(0, 10, size=length)
                self.active.append(
                    {
                        "digits": torch.as_tensor(p),
                        "prev": torch.full((n,), 10),
                        "tokens": torch.zeros(n, length, dtype=torch.long),
                        "pos": 0,
                        "version": version,
                    }
                )
            done: list[dict[str, Any]] = []
            with torch.no_grad():
                for _ in range(steps):
                    if not self.active:
                        break
                    for seq in self.active:
                        length = seq["tokens"].shape[1]
                        logits = self.model(_features(torch, seq["digits"], seq["prev"], seq["pos"], length))
                        seq["prev"] = torch.multinomial(torch.softmax(logits, dim=1), 1).squeeze(1)
                        seq["tokens"][:, seq["pos"]] = seq["prev"]
                        seq["pos"] += 1
                    time.sleep(DECODE_STEP_S)  # one decode step of the whole running batch
                    finished = [q for q in self.active if q["pos"] == q["tokens"].shape[1]]
                    self.active = [q for q in self.active if q["pos"] < q["tokens"].shape[1]]
                    for seq in finished:
                        target = torch.sort(seq["digits"]).values
                        correct = (seq["tokens"] == target).float()
                        done.append(
                            {
                                "prompt": seq["digits"].numpy(),
                                "tokens": seq["tokens"].numpy(),
                                "correct": correct.numpy(),
                                "reward": correct.mean(dim=1).numpy(),
                                "version": seq["version"],
                            }
                        )
            return done, len(self.active)

        def gradients(self, weights: Any, version: int, groups: list[dict[str, Any]]) -> list[np.ndarray]:
            """Policy-gradient gradients on a shard: per-token advantages against the group mean."""
            self._load(weights, version)
            self.model.zero_grad()
            loss = torch.zeros(())
            tokens_total = 0
            for g in groups:
                digits = torch.as_tensor(g["prompt"])
                tokens = torch.as_tensor(g["tokens"])
                correct = torch.as_tensor(g["correct"])
                adv = correct - correct.mean(dim=0, keepdim=True)
                n, length = tokens.shape
                prev = torch.full((n,), 10)
                for pos in range(length):
                    logp = torch.log_softmax(self.model(_features(torch, digits, prev, pos, length)), dim=1)
                    loss = loss - (adv[:, pos] * logp.gather(1, tokens[:, pos : pos + 1]).squeeze(1)).sum()
                    prev = tokens[:, pos]
                tokens_total += n * length
            torch.autograd.backward(loss / max(1, tokens_total))
            time.sleep(TRAIN_TOKEN_S * tokens_total)
            return [p.grad.detach().numpy().copy() for p in self.model.parameters()]

    return Worker


def _queue_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class ExperienceQueue:
        """Groups with version tags; AReaL admission control; the oldest first to the trainer."""

        def __init__(self, batch: int, eta: int) -> None:
            self.batch, self.eta = batch, eta
            self.groups: list[dict[str, Any]] = []
            self.accepted = 0
            self.dropped = 0

        def capacity(self, version: int, running: int) -> int:
            """AReaL's rule: (eta + version + 1) * batch - (accepted + running)."""
            return (self.eta + version + 1) * self.batch - (self.accepted + running)

        def put(self, groups: list[dict[str, Any]]) -> int:
            self.groups.extend(groups)
            self.accepted += len(groups)
            return len(self.groups)

        def take(self, version: int) -> list[dict[str, Any]] | None:
            keep = [g for g in self.groups if version - g["version"] <= self.eta]
            stale = len(self.groups) - len(keep)
            self.dropped += stale
            self.accepted -= stale
            self.groups = keep
            if len(self.groups) < self.batch:
                return None
            self.groups.sort(key=lambda g: g["version"])
            batch, self.groups = self.groups[: self.batch], self.groups[self.batch :]
            return batch

        def depth(self) -> tuple[int, int]:
            return len(self.groups), self.dropped

    return ExperienceQueue


def _shards(batch: list[Any], k: int) -> list[list[Any]]:
    return [batch[i::k] for i in range(k) if batch[i::k]]


def _split(current: int, rates: tuple[float, float], buffer: int, batch: int, workers: int) -> int:
    """Rollout workers: DART's drift-plus-penalty score over integer splits, from measured
    per-worker rates, moving only for a gain above the hysteresis band (10%)."""
    from dartfl.datacenter.policies.dart import drift_plus_penalty

    r = np.arange(1, workers, dtype=np.float64)
    per_rollout, per_train = rates
    score = drift_plus_penalty(r * per_rollout, (workers - r) * per_train, buffer, batch, 0.2)
    best = int(np.argmax(score))
    here = current - 1
    if score[best] - score[here] <= 0.1 * abs(score[here]):
        return current
    return int(r[best])


def run_ray(config: RayRunConfig, specs: list[str]) -> list[dict[str, Any]]:
    """Run each policy (`sync`, `static:F`, `dart`) for real on one Ray cluster; summaries."""
    import ray
    import torch

    for spec in specs:
        if spec not in ("sync", "dart") and not spec.startswith("static:"):
            raise ConfigError(f"unknown policy {spec!r} for the Ray engine; valid: sync, static:F, dart")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        return [_run_policy(ray, torch, config, spec) for spec in specs]
    finally:
        ray.shutdown()


def _run_policy(ray: Any, torch: Any, cfg: RayRunConfig, spec: str) -> dict[str, Any]:
    torch.manual_seed(cfg.seed)
    model = _make_model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    workers = [_worker_class().remote(cfg.seed * 100 + i) for i in range(cfg.workers)]
    eta = 0 if spec == "sync" else cfg.eta
    queue = _queue_class().remote(cfg.batch_groups, eta)
    weights = ray.put({k: v.clone() for k, v in model.state_dict().items()})
    st = _RunState()
    start = time.perf_counter()

    def apply(grads: list[list[np.ndarray]]) -> Any:
        opt.zero_grad()
        for i, p in enumerate(model.parameters()):
            p.grad = torch.as_tensor(np.mean([g[i] for g in grads], axis=0))
        opt.step()
        return ray.put({k: v.clone() for k, v in model.state_dict().items()})

    def train_on(batch: list[dict[str, Any]], version: int, idx: list[int]) -> list[Any]:
        st.rewards.append(float(np.mean([g["reward"].mean() for g in batch])))
        st.staleness += [version - g["version"] for g in batch]
        shards = _shards(batch, len(idx))
        return [workers[i].gradients.remote(weights, version, sh) for i, sh in zip(idx, shards, strict=False)]

    if spec == "sync":
        st.layouts.add("colocated")
        per = math.ceil(cfg.batch_groups / cfg.workers)
        for version in range(cfg.steps):
            batch: list[dict[str, Any]] = []
            admits = [per] * cfg.workers
            left = cfg.workers
            while left:
                slices = [
                    w.run_steps.remote(weights, version, a, cfg.group_size, 1000)
                    for w, a in zip(workers, admits, strict=True)
                ]
                left = 0
                for done, active in ray.get(slices):
                    batch += done
                    left += active
                admits = [0] * cfg.workers
            weights = apply(ray.get(train_on(batch[: cfg.batch_groups], version, list(range(cfg.workers)))))
        return _summary(spec, cfg, time.perf_counter() - start, st, 0, 0.0, 0.0)

    # asynchronous: rollout workers run continuous batching in slices; one trainer step at a time
    n_roll = cfg.workers - 1
    if spec == "dart" and cfg.dart_start_rollout is not None:
        n_roll = min(cfg.workers - 1, max(1, cfg.dart_start_rollout))
    if spec.startswith("static:"):
        n_roll = min(cfg.workers - 1, max(1, round(float(spec.split(":")[1]) * cfg.workers)))
    roles = ["rollout" if i < n_roll else "train" for i in range(cfg.workers)]
    st.layouts.add("/".join(roles))
    version = 0
    calls: dict[Any, int] = {}  # run_steps ref -> worker
    active = [0] * cfg.workers
    train_refs: list[Any] = []
    train_started = 0.0
    roll_groups, train_groups, train_busy = 0, 0, 1e-9
    idle = {"rollout": 0.0, "train": 0.0}
    alloc = {"rollout": 0.0, "train": 0.0}
    next_period = start + cfg.period_s
    last = start
    while version < cfg.steps:
        now = time.perf_counter()
        for i, role in enumerate(roles):
            alloc[role] += now - last
            working = (i in calls.values()) if role == "rollout" else bool(train_refs) and i in st.trainers
            idle[role] += 0.0 if working else now - last
        last = now
        # 1. rollout: every idle rollout worker gets a slice, admitting what the bound allows
        capacity = ray.get(queue.capacity.remote(version, sum(active)))
        for i, role in enumerate(roles):
            if role == "rollout" and i not in calls.values():
                admit = max(0, min(capacity, SLOTS - active[i]))
                capacity -= admit
                active[i] += admit
                if active[i]:
                    calls[
                        workers[i].run_steps.remote(weights, version, admit, cfg.group_size, SLICE_STEPS)
                    ] = i
        # 2. trainer: a step on the oldest batch within the bound
        if not train_refs:
            batch = ray.get(queue.take.remote(version))
            if batch is not None:
                st.trainers = [i for i, r in enumerate(roles) if r == "train"]
                train_refs = train_on(batch, version, st.trainers)
                train_started = time.perf_counter()
        # 3. wait for the first result
        ready, _ = ray.wait(list(calls) + train_refs, num_returns=1, timeout=cfg.period_s)
        for ref in ready:
            if ref in calls:
                i = calls.pop(ref)
                done, active[i] = ray.get(ref)
                if done:
                    ray.get(queue.put.remote(done))
                roll_groups += len(done)
        if train_refs and not ray.wait(train_refs, num_returns=len(train_refs), timeout=0)[1]:
            weights = apply(ray.get(train_refs))
            train_busy += time.perf_counter() - train_started
            train_groups += cfg.batch_groups
            train_refs = []
            version += 1
        # 4. control period: DART re-splits from measured per-worker rates and the buffer
        if spec == "dart" and time.perf_counter() >= next_period and not train_refs:
            next_period = time.perf_counter() + cfg.period_s
            n_now = roles.count("rollout")
            elapsed = time.perf_counter() - start
            per_roll = roll_groups / max(1e-9, n_now * elapsed)
            per_train = train_groups / max(1e-9, train_busy * (cfg.workers - n_now))
            depth, _ = ray.get(queue.depth.remote())
            target = _split(n_now, (per_roll, per_train), depth, cfg.batch_groups, cfg.workers)
            move = -1
            if target > n_now:
                move = roles.index("train")
            elif target < n_now:
                free = [i for i, r in enumerate(roles) if r == "rollout" and i not in calls.values()]
                move = free[-1] if free else -1
            if move >= 0:
                roles[move] = "rollout" if roles[move] == "train" else "train"
                st.abandoned += ray.get(workers[move].set_role.remote(roles[move]))
                active[move] = 0
                st.switches += 1
                st.layouts.add("/".join(roles))
    ray.get(list(calls))
    _, dropped = ray.get(queue.depth.remote())
    return _summary(
        spec,
        cfg,
        time.perf_counter() - start,
        st,
        dropped,
        idle["rollout"] / max(1e-9, alloc["rollout"]),
        idle["train"] / max(1e-9, alloc["train"]),
    )


@dataclass
class _RunState:
    rewards: list[float] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    layouts: set[str] = field(default_factory=set)
    trainers: list[int] = field(default_factory=list)
    switches: int = 0
    abandoned: int = 0


def _summary(
    spec: str,
    cfg: RayRunConfig,
    elapsed: float,
    st: _RunState,
    dropped: int,
    roll_idle: float,
    train_idle: float,
) -> dict[str, Any]:
    rewards = st.rewards
    samples = len(rewards) * cfg.batch_groups * cfg.group_size
    return {
        "policy": spec,
        "samples_per_s": samples / elapsed,
        "tokens_per_s": float("nan"),
        "steps": len(rewards),
        "rollout_idle_ratio": roll_idle,
        "trainer_idle_ratio": train_idle,
        "staleness_max": max(st.staleness, default=0),
        "staleness_mean": float(np.mean(st.staleness)) if st.staleness else 0.0,
        "dropped_samples": (dropped + st.abandoned) * cfg.group_size,
        "switches": st.switches,
        "reward_curve": rewards,
        "reward_first": rewards[0] if rewards else 0.0,
        "reward_last5": float(np.mean(rewards[-5:])) if rewards else 0.0,
        "role_layouts": sorted(st.layouts),
        "wall_s": elapsed,
    }
