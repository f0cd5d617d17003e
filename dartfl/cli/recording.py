"""Write finished runs to the run store (SQLite), so `dartfl runs` and the dashboard see them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.cli.plots import windowed_p99_s
from dartfl.metrics import RunRecord
from dartfl.paths import default_store_path
from dartfl.profiles import profile_to_toml
from dartfl.store import DecisionRow, RunStore
from dartfl.types import DeviceProfile

# Flags that say how a command printed or kept its books, not what ran: left out of the
# recorded config (and hidden by `runs show` in stores written before).
CLI_BOOKKEEPING = frozenset(
    {"handler", "verbose", "json", "no_plot", "no_store", "command", "edge_command", "workload_flags_given"}
)


def run_config(args: argparse.Namespace, *, leave_out: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The flags of a run as the store records them: plain JSON values, bookkeeping left out."""
    return {key: _plain(value) for key, value in vars(args).items() if key not in CLI_BOOKKEEPING | leave_out}


def check_store(path: Path | None) -> None:
    """Open the run store a command will record into (`--store`, else the default) now, so a
    damaged, newer, mistyped or read-only file is named in the store's own one-line error before the
    command's slow work, not after it. A missing file is created, as recording would."""
    with RunStore(path or default_store_path()) as store:
        store.check_writable()


def decision_rows(record: RunRecord) -> list[DecisionRow]:
    """One row per control period: backlog and decision at its start, samples trained in it."""
    p = record.periods
    t = p.get("t_s")
    if t is None or t.size == 0:
        return []  # e.g. a replay, seen from the requester's side only
    trained_cum = np.append(p["trained"], sum(record.trained_per_task))
    trained = np.diff(trained_cum).astype(np.int64)
    period = float(t[1] - t[0]) if t.size > 1 else record.horizon_s
    win_t, p99 = windowed_p99_s(record, period)
    p99_at = dict(zip(np.round(win_t / period).astype(np.int64).tolist(), p99.tolist(), strict=True))
    shares = p["task_shares"]
    return [
        DecisionRow(
            t_s=float(t[j]),
            backlog=int(p["backlog"][j]),
            inference_share=float(p["inference_share"][j]),
            microbatch=int(p["microbatch"][j]),
            max_batch=int(p["max_batch"][j]),
            task_shares=tuple(float(y) for y in shares[j]),
            trained_samples=max(0, int(trained[j])),
            latency_p99_s=p99_at.get(round(t[j] / period)),
        )
        for j in range(t.size)
    ]


def _plain(value: Any) -> Any:
    """Flag values as JSON: paths as strings, sets as sorted lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    return value


def record_runs(
    store_path: Path | None,
    kind: str,
    args: argparse.Namespace,
    arrivals: Arrivals,
    label: str,
    runs: list[tuple[RunRecord, dict[str, Any]]],
    extra_config: dict[str, Any] | None = None,
    *,
    started_s: float,
    status: str = "ok",
) -> int:
    """Record one run (several policies' records and summaries) and return its id; `status`
    is how it ended (`failed`: some results are missing, the config says why).

    `started_s` is the Unix time the run began: it is recorded once it is over, and its
    duration is from then to now (not the few milliseconds that recording takes)."""
    config = run_config(args)
    config.update(extra_config or {})
    config["requests"] = arrivals.num_requests
    config["duration_s"] = arrivals.duration_s
    config["task_names"] = list(arrivals.task_names)
    with RunStore(store_path or default_store_path()) as store:
        run_id = store.start_run(kind, label, config, started_s=started_s)
        try:
            for record, summary in runs:
                store.add_decisions(run_id, record.policy, decision_rows(record))
                store.add_result(run_id, record.policy, summary)
        except BaseException:
            store.finish_run(run_id, "failed")  # never leave a run marked as running
            raise
        store.finish_run(run_id, status)
    return run_id


def record_sim(
    store_path: Path | None,
    args: argparse.Namespace,
    arrivals: Arrivals,
    profile: DeviceProfile,
    outcome: Any,
    *,
    started_s: float,
) -> int:
    label = f"{arrivals.num_requests:,} req / {arrivals.duration_s:.0f} s on {profile.name}"
    pairs = list(zip(outcome.records, outcome.summaries, strict=True))
    # The profile as run (after --cores), not only its name or the path it was read from: a
    # profile file edited or moved later would otherwise leave the run impossible to repeat.
    extra: dict[str, Any] = {"profile_name": profile.name, "profile_toml": profile_to_toml(profile)}
    from dartfl.policies import EDGE_POLICIES
    from dartfl.policies.plugins import plugin_sources

    # A plugin's result says which code made it (the same name may be another version later),
    # and a policy that failed says why its result is missing: the run is then `failed`.
    plugins = plugin_sources(args.policies or [], EDGE_POLICIES.entries.__contains__)
    if plugins:
        extra["policy_plugins"] = plugins
    if outcome.failures:
        extra["failed"] = outcome.failures
    status = "failed" if outcome.failures else "ok"
    return record_runs(
        store_path, "sim", args, arrivals, label, pairs, extra, started_s=started_s, status=status
    )
