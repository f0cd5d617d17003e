"""Human-readable tables for the CLI (rich)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dartfl.arrivals import Arrivals
from dartfl.types import DeviceProfile


def cell(value: float | None, spec: str) -> str:
    """A number for a table cell; "-" for an undefined one (JSON null)."""
    return "-" if value is None else format(value, spec)


def _ms(value: float | None) -> str:
    return cell(None if value is None else value * 1e3, ".1f")


def print_sim_table(summaries: Sequence[dict[str, Any]], arrivals: Arrivals, profile: DeviceProfile) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"{arrivals.num_requests} requests over {arrivals.duration_s:.0f} s "
            f"({arrivals.mean_rate_per_s():.1f} req/s), profile {profile.name}"
            + (f" ({profile.cores.count} cores)" if profile.cores.count > 1 else "")
        )
    )
    for col in (
        "policy",
        "SLO met",
        "p50 ms",
        "p99 ms",
        "rejected",
        "trained",
        "harvest",
        "max backlog",
        "decide µs",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in summaries:
        table.add_row(
            r["policy"],
            f"{100 * r['slo_attainment']:.2f}%",
            _ms(r["p50_latency_s"]),
            _ms(r["p99_latency_s"]),
            str(r["rejected"]),
            str(r["train_samples"]),
            cell(r["harvest_efficiency"], ".3f"),
            str(r["max_backlog"]),
            cell(r["decision_us_p50"], ".1f"),
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)  # piped output: do not squeeze the columns to 80
    console.print(table)


def print_replay_table(report: dict[str, Any], arrivals: Arrivals, device: str, policy: str) -> None:
    """One replay: what the requester saw and what the device trained, like `sim`'s table."""
    from rich.console import Console
    from rich.table import Table

    lag = report.get("send_lag_s") or {}
    table = Table(
        title=(
            f"{arrivals.num_requests} requests over {arrivals.duration_s:.0f} s "
            f"({arrivals.mean_rate_per_s():.1f} req/s) replayed to {device} ({report.get('payload')} payload)"
        )
    )
    columns = ["policy", "SLO met", "p50 ms", "p99 ms", "replies", "rejected", "errors", "lost"]
    columns += ["trained", "harvest", "accuracy", "send lag p99 ms"]
    for col in columns:
        table.add_column(col, justify="left" if col == "policy" else "right")
    table.add_row(
        policy,
        f"{100 * report['slo_attainment']:.2f}%",
        _ms(report["p50_latency_s"]),
        _ms(report["p99_latency_s"]),
        str(report["replies"]),
        str(report["rejected"]),
        str(report["errors"]),
        str(report["lost"]) + (f" (+{report['late_replies']} late)" if report.get("late_replies") else ""),
        str(report["train_samples"]),
        cell(report["harvest_efficiency"], ".3f"),
        cell(report["accuracy"], ".3f"),
        _ms(lag.get("p99")),
    )
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    console.print(table)
