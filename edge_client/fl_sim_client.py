"""One federated round of a virtual client: a virtual-time device whose training runs for real.

The client replays its own bursty workload (generator, load and favourite task chosen by its
partition id) through the device simulator for the round's duration. Every training
microbatch the allocator schedules is executed by a real Trainer on the client's data
partition through the simulator's `on_step` hook. Timing is modelled, accuracy is real, and
everything is seeded by (seed, partition id, round), so a run is reproducible.

Nothing here imports Flower: `edge_client.client_app` converts records at its edge.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.metrics import summarize
from dartfl.policies import make_policy
from dartfl.sim import SimConfig, simulate
from dartfl.types import TaskSpec
from fltask.config import FlConfig, split_list
from fltask.data import TaskData, load_tasks
from fltask.model import build_model, get_weights, set_weights
from fltask.partition import client_view, partition_dirichlet, partition_iid
from fltask.trainer import Trainer

__all__ = ["RoundOutcome", "client_arrivals", "client_partition", "fleet_demand", "run_sim_round"]

QUEUE_CAPACITY = 1024


@dataclass(frozen=True)
class RoundOutcome:
    """What a client returns: its trained weights, per-task sample counts and round metrics."""

    weights: dict[str, np.ndarray]
    samples_per_task: dict[str, int]
    metrics: dict[str, float]


def _favourite(cfg: FlConfig, partition_id: int) -> int:
    names = cfg.task_names
    favs = split_list(cfg.favourite_tasks)
    return names.index(favs[partition_id % len(favs)]) if favs else partition_id % len(names)


def client_mix(cfg: FlConfig, partition_id: int) -> tuple[float, ...]:
    """Expected share of the client's requests per task (tasks in config order)."""
    k = len(cfg.task_names)
    rank = np.arange(1, k + 1, dtype=np.float64) ** -cfg.zipf
    rank /= rank.sum()
    fav = _favourite(cfg, partition_id)
    return tuple(float(rank[(j - fav) % k]) for j in range(k))


def client_rate_per_s(cfg: FlConfig, partition_id: int) -> float:
    profile = cfg.device_profile()
    load = cfg.loads[partition_id % len(cfg.loads)]
    return load * profile.capacity_per_s(cfg.task_names, client_mix(cfg, partition_id))


def fleet_demand(cfg: FlConfig, num_clients: int) -> dict[str, float]:
    """lambda_k: the fleet's expected arrival rate per task (requests/s), for demand weighting."""
    total = np.zeros(len(cfg.task_names))
    for pid in range(num_clients):
        total += client_rate_per_s(cfg, pid) * np.asarray(client_mix(cfg, pid))
    return {name: float(x) for name, x in zip(cfg.task_names, total, strict=True)}


def client_arrivals(cfg: FlConfig, partition_id: int, server_round: int) -> Arrivals:
    """The client's requests during one round: its generator, rate and Zipf-skewed task mix."""
    import workloads

    names = cfg.task_names
    fav = _favourite(cfg, partition_id)
    order = names[fav:] + names[:fav]  # rank 0 (most demanded) first
    gens = split_list(cfg.workloads)
    rng = np.random.default_rng([cfg.seed, partition_id, server_round])
    raw = workloads.generate(
        gens[partition_id % len(gens)],
        duration_s=cfg.round_deadline_s,
        rate_per_s=client_rate_per_s(cfg, partition_id),
        task_names=order,
        rng=rng,
        zipf=cfg.zipf,
    )
    to_canonical = np.asarray([names.index(n) for n in order], dtype=np.int64)
    return Arrivals(raw.times_s, to_canonical[raw.tasks], names, raw.duration_s)


def client_partition(cfg: FlConfig, partition_id: int, num_partitions: int) -> dict[str, TaskData]:
    """The client's training samples of every task (the full test sets stay attached)."""
    tasks = load_tasks(
        cfg.task_names, max_train=cfg.max_train_per_task, max_test=cfg.max_test_per_task, seed=cfg.seed
    )
    out = {}
    for k, (name, data) in enumerate(tasks.items()):
        rng = np.random.default_rng([cfg.seed, 1000 + k])
        if cfg.dirichlet_alpha > 0:
            parts = partition_dirichlet(data.y_train, num_partitions, cfg.dirichlet_alpha, rng)
        else:
            parts = partition_iid(data.num_train, num_partitions, rng)
        out[name] = client_view(data, parts[partition_id])
    return out


def run_sim_round(
    cfg: FlConfig,
    partition_id: int,
    num_partitions: int,
    server_round: int,
    global_weights: Mapping[str, np.ndarray],
) -> RoundOutcome:
    """Simulate the round on the virtual device, training the global model for real."""
    data = client_partition(cfg, partition_id, num_partitions)
    model = build_model({n: d.num_classes for n, d in data.items()}, cfg.model_width, seed=cfg.seed)
    set_weights(model, global_weights)
    trainer = Trainer(
        model,
        data,
        lr=cfg.round_learning_rate(server_round),
        step_samples=cfg.step_samples,
        seed=int(np.random.SeedSequence([cfg.seed, partition_id, server_round]).generate_state(1)[0]),
    )
    counts = [0] * len(data)
    ce_sums = [0.0] * len(data)
    wall = [0.0]

    def on_step(samples: int, shares: tuple[float, ...], weights: tuple[float, ...]) -> None:
        result = trainer.train_microbatch(samples, shares, weights)
        for k, (n, ce) in enumerate(zip(result.samples_per_task, result.ce_sum_per_task, strict=True)):
            counts[k] += n
            ce_sums[k] += ce
        wall[0] += result.duration_s

    arrivals = client_arrivals(cfg, partition_id, server_round)
    profile = cfg.device_profile()
    specs = [TaskSpec(n, cfg.slo_ms / 1e3, QUEUE_CAPACITY) for n in cfg.task_names]
    sim_cfg = SimConfig(
        period_s=cfg.period_s,
        round_s=cfg.round_deadline_s,
        round_target_samples=cfg.round_target_samples,
        record_periods=False,
    )
    started = time.perf_counter()
    rng = np.random.default_rng([cfg.seed, partition_id, server_round, 1])
    policy = make_policy(cfg.policy, cfg.loss_weighting or None)
    if server_round > 1:
        # A real device serves without pause and its allocator remembers recent bursts (and
        # the misses it owes) from one round into the next. Replay the previous round's
        # requests first so this round starts from that state, not from a blank allocator.
        warm_rng = np.random.default_rng([cfg.seed, partition_id, server_round - 1, 1])
        simulate(
            client_arrivals(cfg, partition_id, server_round - 1), profile, specs, policy, sim_cfg, warm_rng
        )
    record = simulate(arrivals, profile, specs, policy, sim_cfg, rng, on_step=on_step, keep_policy_state=True)
    t0 = time.perf_counter()
    trainer.flush()
    wall[0] += time.perf_counter() - t0
    # The latency reference: the same requests on a device that never trains.
    reference = simulate(
        arrivals, profile, specs, make_policy("inference-only"), sim_cfg, np.random.default_rng(0)
    )
    summary, ref = summarize(record), summarize(reference)
    requests = int(summary["requests"])
    metrics: dict[str, float] = {
        "num-examples": float(sum(counts)),
        "requests": float(requests),
        "slo-met": summary["slo_attainment"] * requests,
        "slo-met-inference-only": ref["slo_attainment"] * requests,
        "fluid-trainable": float(summary["fluid_trainable_samples"]),
        "train-wall-s": wall[0],
        "client-wall-s": time.perf_counter() - started,
        "partition-id": float(partition_id),
    }
    for k, name in enumerate(cfg.task_names):
        metrics[f"requests-{name}"] = float(summary["per_task"][name]["requests"])
        metrics[f"ce-sum-{name}"] = ce_sums[k]
    return RoundOutcome(
        weights=get_weights(model),
        samples_per_task=dict(zip(cfg.task_names, counts, strict=True)),
        metrics=metrics,
    )
