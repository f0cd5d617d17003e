"""`dartfl workload generate|inspect|plot`: make, examine and draw request workloads.

numpy, matplotlib and the `workloads` package are imported inside the handlers so that
`dartfl --help` stays fast. Handlers import `workloads` submodules, not the facade: under
pytest, tests/workloads/ can shadow the package's top level (see tests/cli/test_workload_cmd.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dartfl.cli.workload_args import WORKLOAD_NAMES, add_generator_arguments, generated_arrivals, parse_tasks
from dartfl.errors import ConfigError

if TYPE_CHECKING:
    from dartfl.arrivals import Arrivals


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    workload = subparsers.add_parser("workload", help="generate, inspect and plot request workloads")
    actions = workload.add_subparsers(dest="workload_command", metavar="ACTION", required=True)

    gen = actions.add_parser("generate", help="write a synthetic workload as a time_s,task CSV")
    gen.add_argument("name", metavar="NAME", help=f"generator, one of: {', '.join(WORKLOAD_NAMES)}")
    add_generator_arguments(gen)
    gen.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.csv", help="CSV file to write")
    gen.set_defaults(handler=_generate)

    def trace_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "file",
            type=Path,
            metavar="FILE",
            help="a trace: time_s,task CSV, Azure LLM, Azure Functions or BurstGPT format",
        )
        p.add_argument(
            "--tasks",
            default=None,
            metavar="A,B,...",
            help="task names to map an Azure trace onto (default digits,fashion,uci-digits)",
        )

    inspect = actions.add_parser("inspect", help="summary statistics of a trace or generated workload")
    trace_arguments(inspect)
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    inspect.set_defaults(handler=_inspect)

    plot = actions.add_parser("plot", help="plot the request rate over time, per task")
    trace_arguments(plot)
    plot.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUT.png", help="image file to write"
    )
    plot.add_argument(
        "--bin-s", type=float, default=1.0, metavar="S", help="bin width in seconds (default 1)"
    )
    plot.add_argument("--lines", action="store_true", help="one line per task instead of stacked areas")
    plot.set_defaults(handler=_plot)


def _load(args: argparse.Namespace) -> tuple[str, Arrivals]:
    """The trace's format and arrivals, from one reading: FILE may be a pipe, or the bundled trace's name."""
    from workloads.traces.load import load_trace_and_format

    tasks = parse_tasks(args.tasks) if args.tasks is not None else None
    return load_trace_and_format(args.file, tasks)


def _generate(args: argparse.Namespace) -> int:
    from dartfl.cli.output_paths import check_output_path
    from workloads.traces.time_task import write_time_task_csv

    check_output_path(args.output, "-o", f"{args.name}.csv")
    arrivals = generated_arrivals(args, args.name)
    if not arrivals.num_requests:  # a header-only file is no trace: reading it back fails
        raise ConfigError(
            f"{args.name} drew no requests at --rate {args.rate:g} over --duration-s {args.duration_s:g}; "
            "raise --rate or --duration-s"
        )
    write_time_task_csv(arrivals, args.output)
    print(
        f"wrote {arrivals.num_requests:,} requests ({_fmt_rate(_mean_rate(arrivals))} req/s over "
        f"{arrivals.duration_s:g} s, tasks {', '.join(arrivals.task_names)}) to {args.output}"
    )
    _say_lost_tail(arrivals)
    return 0


# A quiet end shorter than this share of the horizon moves the rate read back by less than it.
TAIL_SHARE = 0.01


def _say_lost_tail(arrivals: Arrivals) -> None:
    """Warn when the file's horizon, its last request, falls short of the generated one: a
    bursty source's quiet end is lost, and the trace read back is shorter and busier."""
    last = float(arrivals.times_s[-1])
    if arrivals.duration_s - last <= TAIL_SHARE * arrivals.duration_s:
        return
    print(
        f"dartfl: warning: a time_s,task file ends at its last request: read back (inspect, sim "
        f"--trace), this workload lasts {last:.4g} s, not {arrivals.duration_s:g} s, at "
        f"{_fmt_rate(arrivals.num_requests / last)} req/s; its quiet last "
        f"{arrivals.duration_s - last:.3g} s are not stored",
        file=sys.stderr,
    )


def _inspect(args: argparse.Namespace) -> int:
    from dartfl.store import to_jsonable
    from workloads.stats import summarize

    trace_format, arrivals = _load(args)
    try:
        summary = summarize(arrivals)
    except ConfigError as exc:  # a span too long to count: name the file it came from
        raise ConfigError(f"{args.file}: {exc}") from None
    rate = _mean_rate(arrivals)
    if args.json:
        record = {"file": str(args.file), "format": trace_format, **summary.to_dict()}
        record["mean_rate_per_s"] = rate
        print(json.dumps(to_jsonable(record)))  # non-finite as null, as the run store keeps them
        return 0

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.file} ({trace_format})", show_header=False)
    table.add_column("statistic")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{summary.requests:,}")
    table.add_row("duration", f"{summary.duration_s:.1f} s")
    table.add_row("mean rate", f"{_fmt_rate(rate)} req/s")
    for name, count in summary.task_counts:
        share = count / summary.requests if summary.requests else 0.0
        table.add_row(f"task {name}", f"{count:,} ({share:.1%})")
    table.add_row("CV of 1-s counts", _fmt(summary.cv_1s))
    table.add_row("CV of 10-s counts", _fmt(summary.cv_10s))
    table.add_row("peak/mean of 10-s counts", _fmt(summary.peak_to_mean_10s))
    table.add_row("max requests in 1 s", str(summary.max_per_s))
    Console().print(table)
    return 0


def _plot(args: argparse.Namespace) -> int:
    import numpy as np

    from dartfl.cli.output_paths import check_image_path
    from dartfl.cli.plots import pyplot
    from dartfl.files import replaced_when_written

    check_image_path(args.output, "-o")
    plt = pyplot()

    from workloads.stats import binned_counts

    _, arrivals = _load(args)
    try:
        starts, counts = binned_counts(arrivals, args.bin_s)
    except ConfigError as exc:
        raise ConfigError(f"{args.file}: {exc} with --bin-s") from None
    # Divide by each bin's real width: the last bin may be cut short by the horizon.
    widths = np.minimum(args.bin_s, max(arrivals.duration_s, args.bin_s) - starts)
    rates = counts / np.maximum(widths, 1e-12)
    edges = np.append(starts, starts[-1] + widths[-1])
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    if args.lines:
        for name, row in zip(arrivals.task_names, rates, strict=True):
            ax.stairs(row, edges, label=name)
    else:
        bottom = np.zeros(rates.shape[1])
        for name, row in zip(arrivals.task_names, rates, strict=True):
            ax.stairs(bottom + row, edges, baseline=bottom, fill=True, label=name)
            bottom = bottom + row
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"requests/s ({args.bin_s:g}-s bins)")
    ax.set_title(
        f"{args.file.name}: {arrivals.num_requests:,} requests, mean {_fmt_rate(_mean_rate(arrivals))} req/s"
    )
    ax.set_xlim(0, edges[-1])
    ax.legend(title="task", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with replaced_when_written(args.output) as tmp:  # a failed write leaves no partial image
            fig.savefig(tmp, dpi=120, format=args.output.suffix[1:].lower())
    except OSError as exc:
        raise ConfigError(
            f"cannot write {args.output}: {exc.strerror or exc}; check the directory is writable"
        ) from None
    finally:
        plt.close(fig)
    print(f"wrote {args.output}")
    return 0


def _fmt(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "-"


def _mean_rate(arrivals: Arrivals) -> float:
    """Requests/s; NaN where every request is at one instant (no duration, so no rate)."""
    return arrivals.mean_rate_per_s() if arrivals.duration_s > 0 else math.nan


def _fmt_rate(rate: float) -> str:
    """A rate in a few digits, "-" for none (NaN, or infinite for requests in a sliver of a
    second): fixed point gave requests 1e-300 s apart a 300-digit rate."""
    if not math.isfinite(rate):
        return "-"
    return f"{rate:.2f}" if 0.01 <= rate < 1e6 else f"{rate:.3g}"
