"""What the device agent tells the world about itself: the report it publishes as telemetry
(and once more at shutdown), made of the executor's running `Counters`, and the cost profile
in its retained status message."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dartfl.types import DeviceProfile

if TYPE_CHECKING:
    from edge_client.agent import Agent

__all__ = ["Counters", "build_report", "profile_dict"]


@dataclass
class Counters:
    """Executor-side totals (only the executor thread writes them)."""

    trained_per_task: list[int] = field(default_factory=list)
    ce_sum_per_task: list[float] = field(default_factory=list)  # training cross-entropy, summed
    training_busy_s: float = 0.0
    inference_busy_s: float = 0.0
    round_start_s: float = 0.0
    round_trained: int = 0
    rounds_done: list[int] = field(default_factory=list)
    decision_us: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    overhead_cpu_s: float = 0.0  # allocator + queueing + MQTT callbacks, thread CPU time
    compute_cpu_s: float = 0.0  # inference batches and training steps, thread CPU time


def build_report(agent: Agent) -> dict[str, Any]:
    """Totals and the latest window of `agent`: its telemetry payload and its final report."""
    c, cfg = agent.counters, agent.config
    now = time.monotonic()
    window = agent.stats.window(now)
    decisions = list(c.decision_us)
    cpu = time.process_time()
    return {
        "device": cfg.device_id,
        "t": time.time(),
        "uptime_s": now - agent.started_s,
        "policy": agent.policy.name,
        "tasks": list(cfg.tasks),
        "slo_ms": cfg.slo_s * 1e3,
        "backlog": dict(zip(cfg.tasks, agent.queues.backlog(), strict=True)),
        "inference_share": agent.alloc.inference_share,
        "task_shares": dict(zip(cfg.tasks, agent.alloc.task_shares, strict=True)),
        "microbatch": agent.alloc.microbatch,
        "max_batch": agent.alloc.max_batch,
        "latency_ms": {k: window[k] for k in ("p50_ms", "p95_ms", "p99_ms")},
        "slo_attainment_window": window["slo_attainment"],
        "requests": window["requests"],
        "replies": window["replies"],
        "rejected": window["rejected"],
        "errors": window["errors"],
        "train_samples": sum(c.trained_per_task),
        "train_samples_per_task": dict(zip(cfg.tasks, c.trained_per_task, strict=True)),
        "training_busy_s": c.training_busy_s,
        "inference_busy_s": c.inference_busy_s,
        "round": {  # the current round's own target and length (a federated round sets them)
            "target": agent.round_target,
            "trained": c.round_trained,
            "elapsed_s": now - c.round_start_s,
            "length_s": agent.round_s,
            "done": len(c.rounds_done),
            "met": sum(n >= agent.round_target for n in c.rounds_done) if agent.round_target else None,
        },
        "model_version": agent.runtime.version,
        "decision_us_p50": float(np.median(decisions)) if decisions else None,
        "overhead_cpu_s": c.overhead_cpu_s,
        "compute_cpu_s": c.compute_cpu_s,
        "process_cpu_s": cpu,
        "profile": profile_dict(agent.profile),
    }


def profile_dict(profile: DeviceProfile) -> dict[str, Any]:
    """The cost profile as JSON (edge_client.replay.profile_from_status reads it back)."""
    return {
        "name": profile.name,
        "batch_fixed_s": profile.inference.batch_fixed_s,
        "per_request_s": profile.inference.per_request_s,
        "max_batch": profile.max_batch,
        "microbatch_fixed_s": profile.training.microbatch_fixed_s,
        "per_sample_s": profile.training.per_sample_s,
        "max_microbatch": profile.training.max_microbatch,
        "tasks": {
            name: {"batch_fixed_s": c.batch_fixed_s, "per_request_s": c.per_request_s}
            for name, c in profile.task_inference.items()
        },
    }
