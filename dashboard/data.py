"""The dashboard's data access: run-store queries and their shaping into pandas frames.

No Streamlit here, so everything is testable and benchmarkable on its own. Downsampling
happens in SQL (RunStore.telemetry_series / decisions / telemetry_fleet_series); Python only
reshapes the at most a few thousand points that come back. Shapes of the FL and datacenter
runs that these functions read are documented in docs/dashboard.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dartfl.protocol import Telemetry
from dartfl.store import DecisionPoint, RunInfo, RunStore, StoreDamagedError, TelemetryPoint, TelemetryRow
from dashboard.feed import FeedState
from dashboard.telemetry import DeviceStatus, Liveness, number, row_from_snapshot

__all__ = [
    "COMPARE_METRICS",
    "DeviceTile",
    "comparison_frame",
    "dc_frames",
    "decisions_frame",
    "device_frames",
    "fl_frames",
    "fleet_tiles",
    "open_store",
    "points_from_snapshots",
    "run_choices",
]

# The headline metrics of `dartfl sim` (its --json contract), with how to show them.
COMPARE_METRICS: dict[str, str] = {
    "slo_attainment": "SLO attainment",
    "p50_latency_s": "p50 latency (s)",
    "p99_latency_s": "p99 latency (s)",
    "harvest_efficiency": "harvest efficiency",
    "train_samples": "samples trained",
    "max_backlog": "max backlog",
    "rejected": "rejected requests",
    "decision_us_p50": "decision time p50 (us)",
}


def open_store(path: Path) -> RunStore | None:
    """The run store at `path` opened for reading only, or None if there is none yet (reading
    never creates, migrates or writes one). A file that cannot be read raises its one-line
    StoreError or ConfigError."""
    return RunStore(path, read_only=True) if path.exists() else None


def _ts(seconds: Iterable[float]) -> pd.Series:
    return pd.to_datetime(pd.Series(list(seconds), dtype="float64"), unit="s", utc=True)


# -- fleet overview --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceTile:
    """What the fleet overview shows for one device."""

    device: str
    status: DeviceStatus
    age_s: float
    source: str  # "live" (from the broker now) or "history" (the recorder's last row)
    backlog: int | None
    inference_share: float | None
    slo_attainment: float | None
    p99_ms: float | None
    slo_ms: float | None
    train_samples: int | None
    round_trained: int | None
    round_target: int | None
    rounds_done: int | None
    misses_slo: bool

    @property
    def round_progress(self) -> float | None:
        if self.round_trained is None or not self.round_target:
            return None
        return min(1.0, self.round_trained / self.round_target)


def _tile(
    row: TelemetryRow, last_seen_s: float, source: str, now_s: float, liveness: Liveness, **kw: Any
) -> DeviceTile:
    status = liveness.status(last_seen_s, now_s, offline=kw.get("offline", False))
    payload = row.payload or {}
    rnd = payload.get("round")
    rnd = rnd if isinstance(rnd, Mapping) else {}
    slo_target: float = kw["slo_target"]
    misses = status != "gone" and (
        (row.slo_attainment is not None and row.slo_attainment < slo_target)
        or (row.p99_ms is not None and row.slo_ms is not None and row.p99_ms > row.slo_ms)
    )

    def count(name: str) -> int | None:
        value = number(rnd.get(name))
        return None if value is None else int(value)

    return DeviceTile(
        device=row.device,
        status=status,
        age_s=max(0.0, now_s - last_seen_s),
        source=source,
        backlog=row.backlog,
        inference_share=row.inference_share,
        slo_attainment=row.slo_attainment,
        p99_ms=row.p99_ms,
        slo_ms=row.slo_ms,
        train_samples=row.train_samples,
        round_trained=count("trained"),
        round_target=count("target"),
        rounds_done=count("done"),
        misses_slo=misses,
    )


_ORDER = {"alive": 0, "stale": 1, "gone": 2}


def fleet_tiles(
    history: Sequence[TelemetryRow],
    live: FeedState | None,
    now_s: float,
    liveness: Liveness,
    slo_target: float = 0.95,
) -> list[DeviceTile]:
    """One tile per device, from the live feed where it has the device, else from the newest
    recorded row. Devices missing their SLO come first, then by liveness and name."""
    tiles = {
        row.device: _tile(row, row.t_s, "history", now_s, liveness, slo_target=slo_target) for row in history
    }
    recorded_t = {row.device: row.t_s for row in history}
    for name, snap in (live.devices if live is not None else {}).items():
        # Which is newer is decided on the device's own clock, the one both carry (the
        # decoder guarantees `t`): its skew against this host's clock must not let an old
        # recorded row hide the live state.
        if recorded_t.get(name, -math.inf) > snap.snapshot.t:
            continue  # the recorder saw something newer than this process did
        row = row_from_snapshot(snap.snapshot)
        tiles[name] = _tile(
            row, snap.received_s, "live", now_s, liveness, slo_target=slo_target, offline=snap.offline
        )
    return sorted(tiles.values(), key=lambda t: (not t.misses_slo, _ORDER[t.status], t.device))


def fleet_frame(tiles: Sequence[DeviceTile]) -> pd.DataFrame:
    """Per device: p99 relative to its SLO and window SLO attainment, for the fleet chart."""
    rows = [
        {
            "device": t.device,
            "status": t.status,
            "p99_over_slo": (t.p99_ms / t.slo_ms) if t.p99_ms is not None and t.slo_ms else None,
            "slo_attainment": t.slo_attainment,
            "backlog": t.backlog,
            "misses_slo": t.misses_slo,
        }
        for t in tiles
    ]
    return pd.DataFrame(
        rows, columns=["device", "status", "p99_over_slo", "slo_attainment", "backlog", "misses_slo"]
    )


# -- device detail ---------------------------------------------------------------------------


def points_from_snapshots(snapshots: Sequence[Telemetry]) -> list[TelemetryPoint]:
    """Live snapshots (kept in memory, at most a few hundred) as one-snapshot points."""
    points = []
    for snap in snapshots:
        row = row_from_snapshot(snap)
        points.append(
            TelemetryPoint(
                t_s=row.t_s,
                count=1,
                backlog_max=row.backlog,
                backlog_mean=None if row.backlog is None else float(row.backlog),
                inference_share=row.inference_share,
                p50_ms=row.p50_ms,
                p95_ms=row.p95_ms,
                p99_ms=row.p99_ms,
                slo_ms=row.slo_ms,
                slo_attainment=row.slo_attainment,
                slo_attainment_min=row.slo_attainment,
                train_samples=row.train_samples,
                task_shares=dict(snap.task_shares),
                train_samples_per_task=dict(snap.train_samples_per_task),
            )
        )
    return points


def device_frames(points: Sequence[TelemetryPoint]) -> dict[str, pd.DataFrame]:
    """The device page's charts' data: `series` (wide, one row per point), and long frames
    `allocation` (inference vs per-task training share), `latency` (percentiles) and
    `trained` (cumulative samples per task)."""
    t = _ts(p.t_s for p in points)
    series = pd.DataFrame(
        {
            "t": t,
            "backlog_max": [p.backlog_max for p in points],
            "backlog_mean": [p.backlog_mean for p in points],
            "inference_share": [p.inference_share for p in points],
            "slo_attainment": [p.slo_attainment for p in points],
            "slo_ms": [p.slo_ms for p in points],
        }
    )
    allocation, latency, trained = [], [], []
    for when, p in zip(t, points, strict=True):
        x = p.inference_share
        if x is not None:
            allocation.append({"t": when, "use": "inference", "share": x})
            total = sum(p.task_shares.values())
            for task, y in sorted(p.task_shares.items()):
                share = (1.0 - x) * y / total if total > 0 else 0.0
                allocation.append({"t": when, "use": f"train {task}", "share": share})
        for name in ("p50_ms", "p95_ms", "p99_ms"):
            value = getattr(p, name)
            if value is not None:
                latency.append({"t": when, "percentile": name.removesuffix("_ms"), "ms": value})
        for task, n in sorted(p.train_samples_per_task.items()):
            trained.append({"t": when, "task": task, "samples": n})
    return {
        "series": series,
        "allocation": pd.DataFrame(allocation, columns=["t", "use", "share"]),
        "latency": pd.DataFrame(latency, columns=["t", "percentile", "ms"]),
        "trained": pd.DataFrame(trained, columns=["t", "task", "samples"]),
    }


# -- experiments -----------------------------------------------------------------------------


def run_choices(
    store: RunStore | None, kinds: Sequence[str] | None = None, limit: int = 200
) -> list[RunInfo]:
    """Recorded runs, newest first, of the given kinds (all kinds when None)."""
    if store is None:
        return []
    runs = store.list_runs(limit=limit)
    return [r for r in runs if kinds is None or r.kind in kinds]


def run_title(run: RunInfo) -> str:
    return f"#{run.run_id} {run.kind}: {run.label or 'unlabelled'}"


def comparison_frame(
    store: RunStore, runs: Sequence[RunInfo], damage: list[str] | None = None
) -> pd.DataFrame:
    """One row per (run, policy) with the `dartfl sim` headline metrics (NaN when missing).

    A run whose results are damaged is left out, its one-line StoreDamagedError appended to
    `damage` (raised when no list is given), so the other runs still compare."""
    rows = []
    for run in runs:
        try:
            results = store.results(run.run_id)
        except StoreDamagedError as exc:
            if damage is None:
                raise
            damage.append(str(exc))
            continue
        for policy, metrics in results.items():
            row: dict[str, Any] = {"run": run_title(run), "run_id": run.run_id, "policy": policy}
            for key in COMPARE_METRICS:
                row[key] = number(metrics.get(key))
            rows.append(row)
    return pd.DataFrame(rows, columns=["run", "run_id", "policy", *COMPARE_METRICS])


def decisions_frame(
    store: RunStore, run_id: int, policies: Sequence[str], max_points: int = 1000
) -> pd.DataFrame:
    """Per-period decisions of several policies of one run, downsampled in SQL, long format."""
    frames = []
    for policy in policies:
        points = store.decisions(run_id, policy, max_points=max_points)
        if points:
            frames.append(_decision_rows(points, policy))
    columns = ["t_s", "policy", "backlog_max", "inference_share", "microbatch", "trained_samples"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _decision_rows(points: Sequence[DecisionPoint], policy: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "t_s": [p.t_s for p in points],
            "policy": policy,
            "backlog_max": [p.backlog_max for p in points],
            "inference_share": [p.inference_share for p in points],
            "microbatch": [p.microbatch for p in points],
            "trained_samples": [p.trained_samples for p in points],
        }
    )


# -- federated rounds ------------------------------------------------------------------------


def _clients(value: object) -> list[tuple[str, float]]:
    """`clients` as a mapping {id: {"samples": n}} or {id: n}, or a list of {"client", "samples"}."""
    out: list[tuple[str, float]] = []
    if isinstance(value, Mapping):
        for cid, v in value.items():
            n = number(v.get("samples")) if isinstance(v, Mapping) else number(v)
            if n is not None:
                out.append((str(cid), n))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                n = number(item.get("samples"))
                if n is not None:
                    out.append((str(item.get("client", item.get("node_id", i))), n))
    return out


def fl_frames(run: RunInfo, results: Mapping[str, Mapping[str, Any]]) -> dict[str, pd.DataFrame]:
    """An FL run's rounds: `accuracy` (policy, round, task, accuracy), `summary` (policy, round,
    metric in {mean, demand-weighted}, accuracy) and `clients` (policy, round, client, samples).
    Demand-weighted accuracy is computed from the config's `task_demand` when a round lacks it."""
    demand = run.config.get("task_demand")
    if not isinstance(demand, Mapping):  # the FL server's summary keeps it per policy
        demand = next((m.get("demand_per_task") for m in results.values() if m.get("demand_per_task")), None)
    demand = (
        {k: w for k, v in demand.items() if (w := number(v)) is not None}
        if isinstance(demand, Mapping)
        else {}
    )
    accuracy, summary, clients = [], [], []
    for policy, metrics in results.items():
        rounds = metrics.get("rounds")
        if not isinstance(rounds, list):  # the FL server writes a round count there, the list in history
            rounds = metrics.get("history")
        for i, rnd in enumerate(rounds if isinstance(rounds, list) else []):
            if not isinstance(rnd, Mapping):
                continue
            r = number(rnd.get("round"))
            r = float(i + 1) if r is None else r
            acc = rnd.get("accuracy", rnd.get("accuracy_per_task"))
            per_task = (
                {k: a for k, v in acc.items() if (a := number(v)) is not None}
                if isinstance(acc, Mapping)
                else {}
            )
            for task, a in sorted(per_task.items()):
                accuracy.append({"policy": policy, "round": r, "task": task, "accuracy": a})
            mean = number(rnd.get("mean_accuracy"))
            if mean is None and per_task:
                mean = sum(per_task.values()) / len(per_task)
            weighted = number(rnd.get("weighted_accuracy", rnd.get("demand_weighted_accuracy")))
            weights = {k: demand[k] for k in per_task if k in demand}
            if weighted is None and weights and sum(weights.values()) > 0:
                weighted = sum(per_task[k] * w for k, w in weights.items()) / sum(weights.values())
            for name, value in (("mean", mean), ("demand-weighted", weighted)):
                if value is not None:
                    summary.append({"policy": policy, "round": r, "metric": name, "accuracy": value})
            per_client = _clients(rnd.get("clients"))
            total = number(rnd.get("samples"))
            if not per_client and total is not None:
                per_client = [("all clients", total)]
            for cid, n in per_client:
                clients.append({"policy": policy, "round": r, "client": cid, "samples": n})
    return {
        "accuracy": pd.DataFrame(accuracy, columns=["policy", "round", "task", "accuracy"]),
        "summary": pd.DataFrame(summary, columns=["policy", "round", "metric", "accuracy"]),
        "clients": pd.DataFrame(clients, columns=["policy", "round", "client", "samples"]),
    }


# -- datacenter ------------------------------------------------------------------------------


def dc_frames(store: RunStore, run: RunInfo, max_points: int = 1000) -> dict[str, pd.DataFrame]:
    """A datacenter run: `roles` (t_s, policy, role, gpus), `buffer` (t_s, policy, depth),
    `throughput` (t_s, policy, samples_per_s), `staleness` (policy, lag, count) and `summary`
    (policy, throughput_samples_per_s, speedup, staleness_mean, staleness_max)."""
    gpus = number(run.config.get("gpus"))
    results = store.results(run.run_id)
    roles, buffer, throughput = [], [], []
    for policy in results:
        points = store.decisions(run.run_id, policy, max_points=max_points)
        for j, p in enumerate(points):
            rollout = p.inference_share * gpus if gpus else p.inference_share
            unit_total = gpus if gpus else 1.0
            roles.append({"t_s": p.t_s, "policy": policy, "role": "rollout", "gpus": rollout})
            roles.append({"t_s": p.t_s, "policy": policy, "role": "train", "gpus": unit_total - rollout})
            buffer.append({"t_s": p.t_s, "policy": policy, "depth": p.backlog_max})
            if j + 1 < len(points) and points[j + 1].t_s > p.t_s:
                rate = p.trained_samples / (points[j + 1].t_s - p.t_s)
                throughput.append({"t_s": p.t_s, "policy": policy, "samples_per_s": rate})
    staleness, summary = [], []
    for policy, metrics in results.items():
        hist = metrics.get("staleness_histogram", metrics.get("staleness_counts"))
        if isinstance(hist, Mapping):
            for lag, count in hist.items():
                n, k = number(count), number(_as_float(lag))
                if n is not None and k is not None:
                    staleness.append({"policy": policy, "lag": int(k), "count": n})
        summary.append(
            {
                "policy": policy,
                "throughput_samples_per_s": number(
                    metrics.get("throughput_samples_per_s", metrics.get("samples_per_s"))
                ),
                "speedup": number(metrics.get("speedup")),
                "staleness_mean": number(metrics.get("staleness_mean")),
                "staleness_max": number(metrics.get("staleness_max")),
            }
        )
    return {
        "roles": pd.DataFrame(roles, columns=["t_s", "policy", "role", "gpus"]),
        "buffer": pd.DataFrame(buffer, columns=["t_s", "policy", "depth"]),
        "throughput": pd.DataFrame(throughput, columns=["t_s", "policy", "samples_per_s"]),
        "staleness": pd.DataFrame(staleness, columns=["policy", "lag", "count"]),
        "summary": pd.DataFrame(
            summary,
            columns=["policy", "throughput_samples_per_s", "speedup", "staleness_mean", "staleness_max"],
        ),
    }


def _as_float(text: object) -> float | None:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
