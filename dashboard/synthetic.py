"""Synthetic but well-formed data for the dashboard's tests, benchmark and screenshots.

`snapshot()` builds a telemetry snapshot with the agent's fields (edge_client.agent_report,
docs/protocol.md); `fl_results()` and `dc_run()` write runs in the shapes docs/dashboard.md
defines for the FL and datacenter pages. Deterministic for a seed.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from dartfl.protocol import LatencyWindow, RoundProgress, Telemetry
from dartfl.store import DecisionRow, RunStore, TelemetryRow
from dashboard.telemetry import row_from_snapshot

__all__ = ["fill_telemetry", "record_dc_run", "record_fl_run", "snapshot"]

TASKS = ("digits", "fashion", "uci-digits")


def snapshot(
    device: str,
    t_s: float,
    step: int,
    *,
    slo_ms: float = 250.0,
    load: float = 0.5,
    tasks: Sequence[str] = TASKS,
    round_target: int = 2048,
) -> Telemetry:
    """Snapshot number `step` of `device` at Unix time `t_s`: bursty backlog, a share that
    follows it, and counters that grow. `load` > 1 makes a device that misses its SLO."""
    phase = (zlib.crc32(device.encode()) % 97) / 97.0 * 2 * math.pi
    burst = max(0.0, math.sin(step / 20.0 + phase)) ** 4
    backlog = round(load * 40 * burst + (step * 7 + len(device)) % 3)
    share = min(1.0, 0.25 + 0.6 * burst * min(1.0, load))
    p99 = slo_ms * (0.35 + 0.5 * burst) * load * 2
    attainment = max(0.0, min(1.0, 1.0 - max(0.0, load - 0.5) * 0.3 - 0.02 * burst))
    per_task = [int(step * (3 + k) * 0.4) for k in range(len(tasks))]
    raw = np.array([1.0 + k + burst * (len(tasks) - k) for k in range(len(tasks))])
    shares = raw / raw.sum()
    trained_round = int((step % 60) / 60 * round_target * (1.1 - 0.5 * min(1.0, load)))
    busy = _time_use(step, phase, load, len(tasks))
    return Telemetry(
        device=device,
        t=t_s,
        policy="dart",
        tasks=tuple(tasks),
        slo_ms=slo_ms,
        backlog={
            task: backlog // len(tasks) + (k == 0) * (backlog % len(tasks)) for k, task in enumerate(tasks)
        },
        inference_share=share,
        task_shares=dict(zip(tasks, shares.tolist(), strict=True)),
        microbatch=16 if burst < 0.3 else 4,
        max_batch=8,
        latency_ms=LatencyWindow(p99 * 0.3, p99 * 0.75, p99),
        slo_attainment_window=attainment,
        requests=step * 20,
        replies=step * 20,
        rejected=0,
        errors=0,
        train_samples=sum(per_task),
        train_samples_per_task=dict(zip(tasks, per_task, strict=True)),
        uptime_s=float(step),
        inference_busy_s=busy[0],
        training_busy_s=busy[1],
        training_busy_s_per_task=dict(zip(tasks, busy[2], strict=True)),
        idle_s=busy[3],
        round=RoundProgress(round_target, trained_round, float(step % 60), 60.0, step // 60, step // 60),
        model_version=step // 60,
    )


def _time_use(step: int, phase: float, load: float, tasks: int) -> tuple[float, float, list[float], float]:
    """Cumulative serving, training (and per task) and idle seconds after `step` seconds: a
    serving share that swings with the bursts (0.1 to 0.1 + 0.5 load), idle 15%, training the
    rest, split among the tasks in proportion K, K-1, ..., 1. Closed forms of the integrals,
    so the counters only grow."""
    lo = min(1.0, load)
    serving = 0.1 * step + 0.5 * lo * (step / 2 - 10 * (math.cos(step / 20 + phase) - math.cos(phase)))
    idle = 0.15 * step
    training = max(0.0, step - serving - idle)
    weights = [float(tasks - k) for k in range(tasks)]
    per_task = [training * w / sum(weights) for w in weights]
    return serving, training, per_task, idle


def fill_telemetry(
    store: RunStore, devices: int, seconds: int, *, end_s: float, period_s: float = 1.0, batch: int = 20_000
) -> int:
    """`devices` devices x `seconds` of telemetry every `period_s`, ending at `end_s`; every
    tenth device is overloaded (misses its SLO). Returns the rows written."""
    rows: list[TelemetryRow] = []
    written = 0
    steps = int(seconds / period_s)
    for d in range(devices):
        name = f"dev-{d:03d}"
        load = 1.4 if d % 10 == 3 else 0.5
        for i in range(steps):
            rows.append(row_from_snapshot(snapshot(name, end_s - (steps - i) * period_s, i, load=load)))
            if len(rows) >= batch:
                written += store.add_telemetry(rows)
                rows.clear()
    return written + store.add_telemetry(rows)


def record_fl_run(store: RunStore, rounds: int = 8, clients: int = 4, seed: int = 0) -> int:
    """An FL run of two policies in the documented shape (docs/dashboard.md)."""
    rng = np.random.default_rng(seed)
    demand = {"digits": 5.0, "fashion": 3.0, "uci-digits": 1.0}
    run_id = store.start_run(
        "fl",
        f"{clients} clients x {rounds} rounds (synthetic)",
        {"tasks": list(TASKS), "task_demand": demand},
    )
    for policy, speed in (("dart", 1.0), ("inference-first", 0.7)):
        per_round = []
        for r in range(1, rounds + 1):
            acc = {
                task: float(0.95 - 0.7 * math.exp(-speed * r / (2 + k)) - rng.uniform(0, 0.02))
                for k, task in enumerate(TASKS)
            }
            per_round.append(
                {
                    "round": r,
                    "accuracy": acc,
                    "clients": {
                        f"client-{c}": {"samples": int(rng.integers(200, 600) * speed)}
                        for c in range(clients)
                    },
                }
            )
        final = per_round[-1]["accuracy"]
        store.add_result(run_id, policy, {"rounds": per_round, "accuracy": final, "slo_attainment": 0.99})
    store.finish_run(run_id)
    return run_id


def record_dc_run(store: RunStore, seconds: int = 600, gpus: int = 8, seed: int = 0) -> int:
    """A datacenter run of two policies in the documented shape (docs/dashboard.md)."""
    rng = np.random.default_rng(seed)
    run_id = store.start_run("dc", f"{gpus} GPUs, async RL (synthetic)", {"gpus": gpus})
    for policy, adaptive in (("dart", True), ("static:0.5", False)):
        rows, buffer, trained_total = [], 0.0, 0
        for i in range(seconds):
            x = 0.5 if not adaptive else min(0.875, max(0.25, 0.5 + (128 - buffer) / 512))
            produced = x * gpus * rng.uniform(10, 14)
            consumed = min(buffer + produced, (1 - x) * gpus * 16)
            buffer = max(0.0, buffer + produced - consumed)
            trained_total += int(consumed)
            rows.append(DecisionRow(float(i), int(buffer), x, 64, 256, (1.0,), int(consumed)))
        store.add_decisions(run_id, policy, rows)
        lags = rng.poisson(0.6 if adaptive else 1.5, 2000)
        store.add_result(
            run_id,
            policy,
            {
                "throughput_samples_per_s": trained_total / seconds,
                "staleness_histogram": {str(k): int((lags == k).sum()) for k in range(int(lags.max()) + 1)},
            },
        )
    store.finish_run(run_id)
    return run_id
