"""The workload flags shared by `dartfl sim`, `dartfl workload generate` and the edge replayer.

A workload comes from exactly one of `--workload NAME` (a synthetic generator) or
`--trace FILE` (a recorded trace). `arrivals_from_args` turns the parsed flags into
`Arrivals`, optionally sized to a target load on a device profile. numpy and the `workloads`
package are imported inside the functions so that `dartfl --help` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dartfl.errors import ConfigError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import numpy as np

    from dartfl.arrivals import Arrivals
    from dartfl.types import DeviceProfile

__all__ = [
    "WORKLOAD_NAMES",
    "add_generator_arguments",
    "add_workload_arguments",
    "arrivals_from_args",
    "generated_arrivals",
    "parse_params",
    "parse_tasks",
    "seed_arg",
    "workload_config",
]

# Listed here, not imported, to keep numpy out of `--help`; a test checks it matches the registry.
WORKLOAD_NAMES = (
    "poisson",
    "mmpp",
    "gamma",
    "pareto-onoff",
    "diurnal",
    "step",
    "flash-crowd",
    "hawkes",
    "compound",
)
DEFAULT_DURATION_S = 600.0
DEFAULT_RATE_PER_S = 50.0
DEFAULT_TASKS = "digits,fashion,uci-digits"
DEFAULT_SEED = 1
# The namespace attribute listing the flags the user typed (as opposed to defaults).
_GIVEN = "workload_flags_given"
# Flags that only shape a synthetic workload; with --trace they would be silently ignored.
_GENERATOR_ONLY = {
    "zipf": "--zipf",
    "rotate_s": "--rotate-s",
    "param": "--param",
}


class _Store(argparse.Action):
    """`store`, remembering that the flag was given explicitly."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self._value(namespace, values))
        _mark_given(namespace, self.dest)

    def _value(self, namespace: argparse.Namespace, values: Any) -> Any:
        """What the flag sets its dest to."""
        return values


class _Append(_Store):
    """`append` into a fresh list (argparse's own shares the default list), remembering the flag."""

    def _value(self, namespace: argparse.Namespace, values: Any) -> Any:
        current = getattr(namespace, self.dest, None) if self.dest in _given(namespace) else None
        return [*(current or []), values]


def _given(namespace: argparse.Namespace) -> set[str]:
    return set(getattr(namespace, _GIVEN, ()))


def _mark_given(namespace: argparse.Namespace, dest: str) -> None:
    setattr(namespace, _GIVEN, _given(namespace) | {dest})


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --trace | --workload, the generator flags, --seed and --target-load."""
    group = parser.add_argument_group("workload")
    source = group.add_mutually_exclusive_group()
    source.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        action=_Store,
        help="replay a trace: time_s,task CSV, Azure LLM, Azure Functions or BurstGPT format; "
        "azure-conv: the bundled Azure LLM conversation hour (CC-BY 4.0)",
    )
    source.add_argument(
        "--workload",
        metavar="NAME",
        action=_Store,
        help=f"synthetic workload, one of: {', '.join(WORKLOAD_NAMES)}",
    )
    _add_shape_arguments(group, with_trace=True)
    group.add_argument(
        "--target-load",
        type=float,
        metavar="LOAD",
        action=_Store,
        default=None,
        help="size the mean rate to this fraction of the device's inference capacity for the "
        "workload's task mix (a trace is stretched in time; a generator gets the matching --rate)",
    )


def add_generator_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The flags of a synthetic workload (for `dartfl workload generate NAME`)."""
    _add_shape_arguments(parser, with_trace=False)


def _add_shape_arguments(
    group: argparse.ArgumentParser | argparse._ArgumentGroup, *, with_trace: bool
) -> None:
    only = "; --workload only" if with_trace else ""
    trace_limit = "; with --trace: the whole trace, or only its first S seconds, after any rescaling"
    trace_limit = trace_limit if with_trace else ""
    group.add_argument(
        "--duration-s",
        type=float,
        default=DEFAULT_DURATION_S,
        metavar="S",
        action=_Store,
        help=f"workload length in seconds (default {DEFAULT_DURATION_S:g}{trace_limit})",
    )
    group.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE_PER_S,
        metavar="REQ_PER_S",
        action=_Store,
        help=f"mean request rate (default {DEFAULT_RATE_PER_S:g})"
        + ("; with --trace, stretch the trace in time to this rate" if with_trace else ""),
    )
    group.add_argument(
        "--tasks",
        default=DEFAULT_TASKS,
        metavar="A,B,...",
        action=_Store,
        help=f"task names (default {DEFAULT_TASKS})"
        + (
            "; with --trace, the task order of a time_s,task file or the tasks an Azure trace maps onto"
            if with_trace
            else ""
        ),
    )
    group.add_argument(
        "--zipf",
        type=float,
        default=0.0,
        metavar="S",
        action=_Store,
        help=f"Zipf exponent of task popularity, 0 = uniform (default 0{only})",
    )
    group.add_argument(
        "--rotate-s",
        type=float,
        default=None,
        metavar="S",
        action=_Store,
        help="rotate which task is most popular every S seconds"
        + (" (--workload only)" if with_trace else ""),
    )
    group.add_argument(
        "--param",
        default=[],
        metavar="KEY=VALUE",
        action=_Append,
        help="generator parameter, repeatable, e.g. --param burst=20 (see docs/workloads.md)",
    )
    group.add_argument(
        "--seed",
        type=seed_arg,
        default=DEFAULT_SEED,
        action=_Store,
        help=f"random seed (default {DEFAULT_SEED})",
    )


def parse_tasks(text: str) -> tuple[str, ...]:
    """'a, b,c' -> ('a', 'b', 'c'); empty or repeated names are errors."""
    names = tuple(part.strip() for part in text.split(","))
    if not names or not all(names) or len(set(names)) != len(names):
        raise ConfigError(
            f"--tasks must be a comma-separated list of unique names, e.g. digits,fashion; got {text!r}"
        )
    return names


def parse_params(items: Sequence[str]) -> dict[str, float]:
    """['burst=20', 'high-s=3'] -> {'burst': 20.0, 'high-s': 3.0}."""
    params: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--param must look like KEY=VALUE, e.g. burst=20; got {item!r}")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"--param {key}: {value.strip()!r} is not a number") from None
        if not math.isfinite(number):
            raise ConfigError(f"--param {key}: value must be finite, got {value.strip()!r}")
        params[key] = number
    return params


def arrivals_from_args(
    args: argparse.Namespace, profile: DeviceProfile | None, *, say_load: bool = True
) -> Arrivals:
    """Build the workload the flags describe; with --target-load, size it against `profile`
    (and, unless `say_load` is off, warn where a trace's busy part runs far from it)."""
    trace: Path | None = getattr(args, "trace", None)
    name: str | None = getattr(args, "workload", None)
    target_load: float | None = getattr(args, "target_load", None)
    if target_load is not None and profile is None:
        raise ConfigError(
            "--target-load needs a device profile to measure the load against; pass one or use --rate"
        )
    given = _given(args)
    if trace is not None:
        return _trace_arrivals(args, trace, given, target_load, profile, say_load)
    if name is None:
        raise ConfigError(
            f"no workload given: pass --workload NAME (one of {', '.join(WORKLOAD_NAMES)}) or --trace FILE"
        )
    if target_load is not None and "rate" in given:
        raise ConfigError("--rate and --target-load both set the mean rate; pass only one of them")
    return generated_arrivals(args, name, profile=profile, target_load=target_load)


def generated_arrivals(
    args: argparse.Namespace,
    name: str,
    *,
    profile: DeviceProfile | None = None,
    target_load: float | None = None,
) -> Arrivals:
    """A synthetic workload from the generator flags; target_load picks the rate for `profile`."""
    from workloads.mix import TaskMix
    from workloads.registry import generate
    from workloads.rescale import rate_for_load

    tasks = parse_tasks(args.tasks)
    rate = float(args.rate)
    if target_load is not None:
        if profile is None:
            raise ConfigError("--target-load needs a device profile to measure the load against")
        # Rate from the expected task mix, so the duration and the generator's time scales
        # (burst lengths, periods) stay as given instead of being stretched.
        shares = TaskMix(tasks, args.zipf, args.rotate_s).expected_shares(args.duration_s)
        rate = rate_for_load(profile, tasks, shares, target_load)
    return generate(
        name,
        duration_s=float(args.duration_s),
        rate_per_s=rate,
        task_names=tasks,
        rng=_rng(args.seed),
        zipf=float(args.zipf),
        rotate_s=args.rotate_s,
        params=parse_params(args.param),
    )


def _trace_arrivals(
    args: argparse.Namespace,
    trace: Path,
    given: set[str],
    target_load: float | None,
    profile: DeviceProfile | None,
    say_load: bool,
) -> Arrivals:
    from workloads.rescale import rescale_to_load, scale_to_rate
    from workloads.traces.load import load_trace

    misplaced = [flag for dest, flag in _GENERATOR_ONLY.items() if dest in given]
    if misplaced:
        raise ConfigError(
            f"{', '.join(misplaced)} only shape a --workload; drop them when replaying --trace {trace}"
        )
    if target_load is not None and "rate" in given:
        raise ConfigError("--rate and --target-load both rescale the trace; pass only one of them")
    tasks = parse_tasks(args.tasks) if "tasks" in given else None
    arrivals = load_trace(trace, tasks, _rng(args.seed))
    if target_load is not None and profile is not None:
        arrivals = rescale_to_load(arrivals, profile, target_load)
        if say_load:
            _say_idle_stretch(arrivals, target_load)
    elif "rate" in given:
        arrivals = scale_to_rate(arrivals, float(args.rate))
    if "duration_s" in given:
        limit = float(args.duration_s)
        if not (math.isfinite(limit) and limit > 0):
            raise ConfigError(f"--duration-s must be > 0, got {args.duration_s}")
        if limit < arrivals.duration_s:  # a window is half-open: one as long as the trace drops its end
            whole = arrivals
            arrivals = arrivals.window(0.0, limit)
            if target_load is not None and say_load:
                _say_window_load(whole, arrivals, target_load)
    return arrivals


# The window's rate may be this far from the whole trace's, either way, before it is said.
WINDOW_RATE_RATIO = 2.0


def _say_idle_stretch(arrivals: Arrivals, target_load: float) -> None:
    """--target-load is a mean over the whole trace; warn when the trace is idle for over half
    of it (days of a log with one busy hour), since its busy part then runs far above it."""
    import numpy as np

    times = arrivals.times_s
    if times.size < 2 or arrivals.duration_s <= 0:
        return
    gap = float(max(np.diff(times).max(), times[0], arrivals.duration_s - times[-1]))
    busy = 1.0 - gap / arrivals.duration_s
    if busy >= 1 / WINDOW_RATE_RATIO:
        return
    log.warning(
        "the trace holds no request for %.0f%% of its length (one gap of %.3g s after rescaling): "
        "--target-load %g is its mean, so the rest runs at a load of about %.2g; cut the trace to "
        "the part you want first",
        100 * gap / arrivals.duration_s,
        gap,
        target_load,
        target_load / busy,
    )


def _say_window_load(whole: Arrivals, window: Arrivals, target_load: float) -> None:
    """--target-load sizes the whole trace; warn when the window kept runs far from it (a trace
    of days whose first hours are busy, or quiet)."""
    mean = whole.num_requests / whole.duration_s if whole.duration_s > 0 else 0.0
    rate = window.num_requests / window.duration_s if window.duration_s > 0 else 0.0
    if mean <= 0 or 1 / WINDOW_RATE_RATIO <= rate / mean <= WINDOW_RATE_RATIO:
        return
    log.warning(
        "the first %g s of the trace arrive at %.3g times its mean rate, so they run at a load of "
        "about %.2g, not %g: --target-load sizes the whole trace (%.0f s); cut the trace to the "
        "part you want first to size that part",
        window.duration_s,
        rate / mean,
        target_load * rate / mean,
        target_load,
        whole.duration_s,
    )


def workload_config(args: argparse.Namespace) -> dict[str, Any]:
    """The flags that define the workload, JSON-ready (for run records)."""
    given = _given(args)
    target_load = getattr(args, "target_load", None)
    config: dict[str, Any] = {"seed": args.seed, "target_load": target_load}
    if getattr(args, "trace", None) is not None:
        config["trace"] = str(args.trace)
        for dest in ("tasks", "rate", "duration_s"):
            if dest in given:
                config[dest] = getattr(args, dest)
        return config
    config.update(
        workload=getattr(args, "workload", None),
        duration_s=args.duration_s,
        tasks=args.tasks,
        zipf=args.zipf,
        rotate_s=args.rotate_s,
        params=parse_params(args.param),
    )
    if target_load is None:  # otherwise the rate follows from the load and the profile
        config["rate"] = args.rate
    return config


def seed_arg(text: str) -> int:
    """The argparse type of every --seed: an integer >= 0, as numpy's generators take it (they
    raise a bare ValueError for a negative one)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def _rng(seed: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng(seed)
