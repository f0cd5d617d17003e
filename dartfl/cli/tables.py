"""Human-readable tables for the CLI (rich)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dartfl.arrivals import Arrivals
from dartfl.types import DeviceProfile


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def print_sim_table(summaries: Sequence[dict[str, Any]], arrivals: Arrivals, profile: DeviceProfile) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"{arrivals.num_requests} requests over {arrivals.duration_s:.0f} s "
            f"({arrivals.mean_rate_per_s():.1f} req/s), profile {profile.name}"
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
            "-" if r["harvest_efficiency"] is None else f"{r['harvest_efficiency']:.3f}",
            str(r["max_backlog"]),
            "-" if r["decision_us_p50"] is None else f"{r['decision_us_p50']:.1f}",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)  # piped output: do not squeeze the columns to 80
    console.print(table)
