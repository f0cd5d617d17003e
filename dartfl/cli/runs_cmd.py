"""`dartfl runs list|show|delete`: read the run store, and delete a run (a damaged one too).

Reading opens the store read-only: nothing is created, migrated or written, and damage is
said in one line (what, where, how to recover) instead of a traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from dartfl.cli.tables import number
from dartfl.errors import InputError
from dartfl.files import exists_or_explain
from dartfl.paths import STORE_ENV, default_store_path
from dartfl.store import RUN_KINDS, RunInfo, RunStore, StoreDamagedError, check_store_file
from dartfl.store.jsonable import to_jsonable

_LIST_CELL_CHARS = 48  # a longer list is summarized: it would fill the value column
# Where runs are recorded when neither --store nor $DARTFL_STORE says (docs/store.md).
DEFAULT_STORE_PLACES = "$XDG_DATA_HOME/dartfl/runs.sqlite or ~/.local/share/dartfl/runs.sqlite"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runs = subparsers.add_parser("runs", help="list, show and delete recorded runs (the run store)")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, json_help: str = "print JSON instead of a table") -> None:
        p.add_argument(
            "--store",
            type=Path,
            default=None,
            help="run store file (default: $DARTFL_STORE, else the per-user data dir: "
            "$XDG_DATA_HOME/dartfl/runs.sqlite or ~/.local/share/dartfl/runs.sqlite)",
        )
        p.add_argument("--json", action="store_true", help=json_help)

    p_list = runs_sub.add_parser("list", help="recorded runs, newest first")
    common(p_list)
    p_list.add_argument("--kind", choices=RUN_KINDS, help="only runs of this kind")
    p_list.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
    p_list.set_defaults(handler=_list)

    p_show = runs_sub.add_parser("show", help="one run's config and per-policy results")
    p_show.add_argument("run_id", type=int, metavar="RUN_ID", help="the run's id (see `dartfl runs list`)")
    common(p_show)
    p_show.set_defaults(handler=_show)

    p_delete = runs_sub.add_parser(
        "delete", help="delete a run with its results and decisions (a damaged one too)"
    )
    p_delete.add_argument("run_id", type=int, metavar="RUN_ID", help="the run's id (see `dartfl runs list`)")
    common(p_delete, "print one JSON object {deleted, store, results, decisions} instead of a line")
    p_delete.set_defaults(handler=_delete)


def _store_path(args: argparse.Namespace) -> Path:
    return args.store if args.store is not None else default_store_path()


def _named_by(args: argparse.Namespace) -> str | None:
    """The flag or variable that named the store; None for the per-user default."""
    if args.store is not None:
        return "--store"
    return f"${STORE_ENV}" if os.environ.get(STORE_ENV) else None


def _existing_store(args: argparse.Namespace, *, missing_default_ok: bool) -> Path:
    """The store to read; InputError if it is not a run store, or is missing (unless
    `missing_default_ok` and it is the default store, which no run has made yet)."""
    path = _store_path(args)
    if exists_or_explain(path, "run store"):
        check_store_file(path)
    elif not (missing_default_ok and _named_by(args) is None):
        raise InputError(_missing_store(path, _named_by(args)))
    return path


def _missing_store(path: Path, named_by: str | None) -> str:
    if named_by is None:
        return (
            f"run store {path} does not exist: no run is recorded yet; pass --store PATH or set {STORE_ENV}"
        )
    # A mistyped path: reading it as an empty store would hide the mistake.
    return (
        f"run store {path} (from {named_by}) does not exist; check the path (runs are recorded in "
        f"{DEFAULT_STORE_PLACES} unless --store or ${STORE_ENV} names another file)"
    )


def _reader(path: Path) -> RunStore:
    """The store opened for reading only (never created, migrated or written); its notice
    (a newer schema) goes to stderr, and the command reads what this version knows."""
    store = RunStore(path, read_only=True)
    if store.notice is not None:
        _warn(store.notice)
    return store


def _warn(line: str) -> None:
    print(f"dartfl: warning: {line}", file=sys.stderr)


def _list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise InputError(f"--limit must be >= 1, got {args.limit}")
    path = _existing_store(args, missing_default_ok=True)
    runs: list[RunInfo] = []
    if path.exists():  # reading must not create a store as a side effect
        with _reader(path) as store:
            runs = store.list_runs(kind=args.kind, limit=args.limit)
    for run in runs:  # the listing is complete: a damaged config is only named
        for line in run.damage:
            _warn(line)
    if args.json:
        print(_json([_summary(r) for r in runs], indent=2))
        return 0

    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not path.exists():  # printed plain: a path is not to be wrapped
        print(f"no run store yet at {path}; commands such as dartfl sim record their runs there")
        return 0
    if not runs:
        console.print(f"no runs in {path}")
        return 0
    # Fits 80 columns: the fixed columns never wrap, label and policies share what is left
    # and fold rather than collapse to an ellipsis.
    table = Table(title=f"runs in {path}", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("label", ratio=1, min_width=12, overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("policies", ratio=1, min_width=17, overflow="fold")  # "inference-first:4"
    for r in runs:
        table.add_row(
            str(r.run_id),
            r.kind,
            r.label or "",
            r.status + (" (damaged)" if r.damage else ""),
            _when(r.created_s, short=True),
            "" if r.duration_s is None else _took(r.duration_s),
            " ".join(r.policies),  # specs hold no spaces: a line breaks between two
        )
    console.print(table)
    return 0


def _show(args: argparse.Namespace) -> int:
    """Shows what reads; exit code 1 when part of the run is damaged (each part named)."""
    path = _existing_store(args, missing_default_ok=False)
    with _reader(path) as store:
        run = store.get_run(args.run_id)
        if run is None:
            raise InputError(f"no run {args.run_id} in {path}; see `dartfl runs list --store {path}`")
        damage = list(run.damage)
        try:
            results = store.results(run.run_id)
        except StoreDamagedError as exc:
            results = {}
            damage.append(str(exc))
    if args.json:
        print(_json({"run": run.to_json(), "results": results, "damage": damage}, indent=2))
    else:
        _print_run(run, results)
    for line in damage:
        print(f"dartfl: damaged: {line}", file=sys.stderr)
    return 1 if damage else 0


def _print_run(run: RunInfo, results: Mapping[str, Mapping[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]run {run.run_id}[/bold] {run.kind} {run.label or ''}  status={run.status}  "
        f"started {_when(run.created_s)}"
    )
    from dartfl.cli.recording import CLI_BOOKKEEPING  # recorded no more; older stores hold it

    shown = {k: v for k, v in _flatten(run.config).items() if k not in CLI_BOOKKEEPING}
    # The keys stay whole, so that no two read the same; long values fold instead.
    config = Table(title="config", show_header=False)
    config.add_column(no_wrap=True, min_width=max(map(len, shown), default=0))
    config.add_column(overflow="fold")
    for key, value in shown.items():
        config.add_row(key, _cell(value))
    console.print(config)
    if not results:
        console.print("no results recorded")
        return
    # Metrics as rows, policies as columns: a few policies, many metrics. Policies that do not
    # fit the width beside the metric names go to a further table, so no name is cut.
    flat = {
        policy: {name: _cell(v) for name, v in _flatten(metrics).items()}
        for policy, metrics in results.items()
    }
    names = list(dict.fromkeys(name for metrics in flat.values() for name in metrics))
    groups = _policy_groups(flat, names, console.width)
    for i, group in enumerate(groups):
        title = "results" if len(groups) == 1 else f"results ({i + 1}/{len(groups)})"
        table = Table(title=title)
        table.add_column("metric", no_wrap=True, min_width=max(map(len, names), default=0))
        for policy in group:
            table.add_column(policy, justify="right", overflow="fold")
        for name in names:
            table.add_row(name, *(flat[policy].get(name, "-") for policy in group))
        console.print(table)


def _policy_groups(flat: Mapping[str, Mapping[str, str]], names: list[str], width: int) -> list[list[str]]:
    """The policies in runs of columns that fit `width` beside the metric column (3
    characters of border and padding each); at least one policy a table."""
    left = max((len(n) for n in [*names, "metric"]), default=6) + 4
    groups: list[list[str]] = [[]]
    used = left
    for policy, cells in flat.items():
        need = max([len(policy), *(len(c) for c in cells.values())]) + 3
        if groups[-1] and used + need > width:
            groups.append([])
            used = left
        groups[-1].append(policy)
        used += need
    return groups


def _delete(args: argparse.Namespace) -> int:
    path = _existing_store(args, missing_default_ok=False)
    with RunStore(path) as store:  # a writer: refuses a newer schema, repairs a missing table
        results, decisions = store.delete_run(args.run_id)
    if args.json:
        print(_json({"deleted": args.run_id, "store": str(path), "results": results, "decisions": decisions}))
    else:
        print(f"deleted run {args.run_id} from {path} ({results} results, {decisions} decisions)")
    return 0


def _json(value: Any, indent: int | None = None) -> str:
    """Strict JSON for --json: a stored row may hold NaN or Infinity (Python's json reads them
    back from a file written by hand), which strict parsers reject; they print as null."""
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=False)


def _summary(run: RunInfo) -> dict[str, Any]:
    summary = run.to_json()
    del summary["config"]  # `runs show` has it; listings stay short
    return summary


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: {"fashion": {"p99_s": 1}} -> {"fashion.p99_s": 1}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _cell(value: Any) -> str:
    """A value in a table cell: a short list of plain values as JSON, a longer one or one of
    records (an FL run's per-round history) as its length, which `--json` shows in full."""
    if isinstance(value, list):
        text = json.dumps(value)
        plain = not any(isinstance(v, Mapping | list) for v in value)
        if plain and len(value) <= 8 and len(text) <= _LIST_CELL_CHARS:
            return text
        return f"({len(value)} {'entry' if len(value) == 1 else 'entries'}; --json shows them)"
    return number(value)


def _took(seconds: float) -> str:
    """A run's duration: 0.42 s, 62 s, 14 min 5 s, 3 h 2 min."""
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 600:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _when(epoch_s: float, *, short: bool = False) -> str:
    """Local time; `short` (a listing's column): without the year and seconds."""
    try:
        when = datetime.fromtimestamp(epoch_s)
    except (ValueError, OverflowError, OSError):
        # A damaged row (NaN, a time no date can be): RunInfo.damage names it; a listing
        # still shows the rest of the row.
        return "?"
    return when.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S")
