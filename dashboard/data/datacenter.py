"""A datacenter run for the Datacenter page: GPU roles, buffer depth and throughput over time
per policy from its per-period decisions, and staleness and throughput from its results."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dartfl.store import RunInfo, RunStore
from dashboard.telemetry import number

__all__ = ["dc_frames"]


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
