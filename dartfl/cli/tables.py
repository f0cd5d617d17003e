"""Human-readable tables for the CLI (rich)."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `dartfl runs` imports this module without numpy
    from dartfl.arrivals import Arrivals
    from dartfl.types import DeviceProfile


def number(value: object) -> str:
    """Any figure in a human table, one way everywhere: integers with thousands separators,
    other numbers to four significant digits (separators from 1,000, never an exponent
    between 0.0001 and 10^15), "-" for an undefined one (None, NaN)."""
    if value is None or isinstance(value, bool):
        return "-" if value is None else str(value)
    if isinstance(value, Integral):  # numpy's integers too
        return f"{int(value):,}"
    if not isinstance(value, Real):
        return str(value)
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return "-" if value != value else str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 1e-4:
        return f"{value:.4g}"
    return f"{value:.2e}"


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
            f"{arrivals.num_requests:,} requests over {arrivals.duration_s:.0f} s "
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
            number(r["rejected"]),
            number(r["train_samples"]),
            cell(r["harvest_efficiency"], ".3f"),
            number(r["max_backlog"]),
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
            f"{arrivals.num_requests:,} requests over {arrivals.duration_s:.0f} s "
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
        number(report["replies"]),
        number(report["rejected"]),
        number(report["errors"]),
        number(report["lost"])
        + (f" (+{number(report['late_replies'])} late)" if report.get("late_replies") else ""),
        number(report["train_samples"]),
        cell(report["harvest_efficiency"], ".3f"),
        cell(report["accuracy"], ".3f"),
        _ms(lag.get("p99")),
    )
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    console.print(table)


def _console() -> Any:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=140)  # piped: do not squeeze


def print_deploy_report(out: dict[str, Any]) -> None:
    """`fl deploy-local`: the rounds as the server timed them, the load each device served,
    and the run's outcome, in the number format of every other table."""
    from rich.table import Table

    rounds = Table(
        title=f"{out['clients']} devices x {out['rounds']} rounds (deadline {out['round_deadline_s']:g} s)"
    )
    for col in ("round", "replies", "server s", "slowest client s", "slowest train s", "overhead s"):
        rounds.add_column(col, justify="right")
    rounds.add_column("updates from", overflow="fold")  # the devices whose updates it aggregated
    for r in out["per_round"]:
        rounds.add_row(
            number(r["round"]),
            number(r["replies"]),
            cell(r["server_round_s"], ".1f"),
            cell(r["slowest_client_s"], ".1f"),
            cell(r.get("slowest_train_s"), ".1f"),
            cell(r["overhead_s"], ".1f"),
            " ".join(r.get("updated") or []) or "-",
        )
    load = Table(title="inference load replayed to each device")
    for col in ("device", "sent", "replies", "ok", "p50 ms", "p99 ms"):
        load.add_column(col, justify="left" if col == "device" else "right")
    for device, d in out["replay"].items():
        load.add_row(
            device,
            number(d["sent"]),
            number(d["replies"]),
            number(d.get("ok")),
            cell(d.get("p50_latency_ms"), ".1f"),
            cell(d.get("p99_latency_ms"), ".1f"),
        )
    console = _console()
    console.print(rounds)
    if (kill := out.get("killed")) is not None:
        when = "never" if kill["killed_after_s"] is None else f"{kill['killed_after_s']:.1f} s in"
        console.print(f"killed {kill['device']}'s SuperNode while {kill['phase']}: {when}")
    console.print(load)
    slo = out.get("slo_attainment")
    outcome = [
        f"mean accuracy {cell(out.get('mean_accuracy'), '.3f')}",
        f"SLO met {'-' if slo is None else f'{slo:.1%}'}",
        f"harvest {cell(out.get('harvest_efficiency'), '.3f')}",
        f"{number(out.get('samples_trained'))} samples trained",
    ]
    overhead = cell(out.get("mean_overhead_s"), ".1f")
    took = f"{cell(out.get('total_s'), '.0f')} s in all, {overhead} s overhead a round"
    console.print(", ".join(outcome) + "; " + took)
    if out.get("leftover_pids"):
        console.print(f"[red]processes left running: {', '.join(map(str, out['leftover_pids']))}[/red]")


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> None:
    """A plain table of ready-made cells: the first column left, the figures right."""
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        if i == 0:  # the names stay whole; the figures' headings wrap instead
            table.add_column(col, no_wrap=True, min_width=max((len(r[0]) for r in rows), default=len(col)))
        else:
            table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    _console().print(table)
