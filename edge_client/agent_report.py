"""What the device agent tells the world about itself: the telemetry snapshot it publishes
(and once more, as its final report, at shutdown), made of the device executor's totals and
the agent's own `Counters`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.executor import DeviceExecutor
from dartfl.protocol import LatencyWindow, RoundProgress, Telemetry
from dartfl.types import DeviceProfile
from edge_client.agent_config import AgentConfig
from edge_client.telemetry import RequestStats

__all__ = ["Counters", "build_report"]


@dataclass
class Counters:
    """What the agent counts beyond the executor (only the executor thread writes them)."""

    ce_sum_per_task: list[float] = field(default_factory=list)  # training cross-entropy, summed
    overhead_cpu_s: float = 0.0  # allocator + queueing + MQTT callbacks, thread CPU time
    compute_cpu_s: float = 0.0  # inference batches and training steps, thread CPU time
    training_cpu_s: float = 0.0  # training steps alone (part of compute_cpu_s), thread CPU time
    started_s: float = field(default_factory=time.monotonic)


def build_report(
    config: AgentConfig,
    device: DeviceExecutor[Any],
    stats: RequestStats,
    counters: Counters,
    model_version: int,
    profile: DeviceProfile,
) -> Telemetry:
    """Totals and the latest window of one agent: its telemetry snapshot.
    The caller holds the lock that serialises the executor."""
    c, cfg, alloc, rounds = counters, config, device.alloc, device.rounds
    now = time.monotonic()
    window = stats.window(now)
    decisions = device.decision_us()
    tasks = cfg.tasks
    uptime_s = now - c.started_s
    busy_s = device.inference_busy_s + device.training_busy_s  # both lanes': may pass uptime
    lanes = device.lanes
    split: dict[str, Any] = {}
    if lanes is not None:
        split = {
            "inference_cores": lanes.held[0],
            "training_cores": lanes.held[1],
            "serving_lane_busy_s": lanes.busy_s(0, now),
            "training_lane_busy_s": lanes.busy_s(1, now),
            "core_switches": device.switches,
            "core_reclaims": device.reclaims,
        }
    return Telemetry(
        device=cfg.device_id,
        t=time.time(),
        uptime_s=uptime_s,
        policy=device.policy.name,
        tasks=tasks,
        slo_ms=cfg.slo_s * 1e3,
        backlog=dict(zip(tasks, device.backlog(), strict=True)),
        inference_share=alloc.inference_share,
        task_shares=dict(zip(tasks, alloc.task_shares, strict=True)),
        microbatch=alloc.microbatch,
        max_batch=alloc.max_batch,
        latency_ms=LatencyWindow(window.p50_ms, window.p95_ms, window.p99_ms),
        slo_attainment_window=window.slo_attainment,
        requests=window.requests,
        replies=window.replies,
        rejected=window.rejected,
        errors=window.errors,
        train_samples=sum(device.trained_per_task),
        train_samples_per_task=dict(zip(tasks, device.trained_per_task, strict=True)),
        training_busy_s=device.training_busy_s,
        inference_busy_s=device.inference_busy_s,
        training_busy_s_per_task=dict(zip(tasks, device.training_busy_s_per_task, strict=True)),
        # The executor thread is the device: what it spent neither serving nor training.
        idle_s=max(0.0, uptime_s - busy_s),
        # The current round's own target and length (a federated round sets them).
        round=RoundProgress(
            target=rounds.target,
            trained=rounds.trained,
            elapsed_s=max(0.0, now - rounds.start_s),
            length_s=rounds.round_s,
            done=len(rounds.closed),
            met=sum(n >= rounds.target for n in rounds.closed) if rounds.target else None,
        ),
        model_version=model_version,
        decision_us_p50=float(np.median(decisions)) if decisions.size else None,
        overhead_cpu_s=c.overhead_cpu_s,
        compute_cpu_s=c.compute_cpu_s,
        process_cpu_s=time.process_time(),
        training_cpu_s=c.training_cpu_s,
        profile=profile,
        **split,
    )
