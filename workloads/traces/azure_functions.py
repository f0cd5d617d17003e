"""The Azure Functions 2019 trace format: invocation counts per function per minute.

Header `HashOwner,HashApp,HashFunction,Trigger,1,2,...,1440` (minute columns numbered from 1;
any number of them is accepted); one row per function with its invocation count in each
minute. Counts become arrivals spread uniformly at random within their minute. Functions map
onto K task names in one of two ways:
- "top": the K most invoked functions become the tasks (most invoked -> the first name); the
  other functions are dropped.
- "hash": every function is kept and assigned to a task by a stable hash (CRC-32) of its
  owner, app and function hashes, so the mapping does not change between runs or machines.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, TraceFormatError
from workloads._common import MAX_REQUESTS, IntArray
from workloads.traces._io import (
    DEFAULT_TASK_NAMES,
    check_task_names,
    finish,
    header_problem,
    parse_count,
    rows,
)

__all__ = ["FUNCTIONS_KEY_COLUMNS", "FUNCTION_MAPPINGS", "read_azure_functions_csv"]

log = logging.getLogger(__name__)

FUNCTIONS_KEY_COLUMNS: tuple[str, ...] = ("HashOwner", "HashApp", "HashFunction", "Trigger")
FUNCTION_MAPPINGS: tuple[str, ...] = ("top", "hash")
MINUTE_S = 60.0
_CUT = "cut the file to fewer minutes or functions"

# Sparse per-minute counts of one function: (minute indices, counts), one part per row.
_Parts = list[tuple[IntArray, IntArray]]


def read_azure_functions_csv(
    path: str | Path,
    task_names: Sequence[str] | None = None,
    rng: np.random.Generator | None = None,
    *,
    mapping: str = "top",
) -> Arrivals:
    """Arrivals from an Azure Functions per-minute trace.

    rng seeds the spread of arrivals within each minute (default: seed 0, so reads repeat).
    """
    path = Path(path)
    names = check_task_names(task_names) or DEFAULT_TASK_NAMES
    if mapping not in FUNCTION_MAPPINGS:
        raise ConfigError(
            f"unknown function mapping {mapping!r}; valid mappings: {', '.join(FUNCTION_MAPPINGS)}"
        )
    rng = np.random.default_rng(0) if rng is None else rng
    k = len(names)
    it = rows(path)
    minutes = 0
    for line, fields in it:
        minutes = _check_header(path, line, fields)
        break
    else:
        raise TraceFormatError(
            str(path), 1, "file is empty; expected the header 'HashOwner,HashApp,HashFunction,Trigger,1,...'"
        )
    per_task = np.zeros((k, minutes), dtype=np.int64)  # "hash" mapping
    per_function: dict[str, tuple[int, _Parts]] = {}  # "top" mapping: total and sparse counts
    width = len(FUNCTIONS_KEY_COLUMNS) + minutes
    functions = 0
    kept = 0  # "hash" mapping: invocations so far, a Python int so it cannot wrap
    for line, fields in it:
        functions += 1
        if len(fields) != width:
            raise TraceFormatError(
                str(path), line, f"expected {width} columns like the header, got {len(fields)}"
            )
        counts = _parse_counts(path, line, fields[len(FUNCTIONS_KEY_COLUMNS) :])
        key = "|".join(fields[:3])
        if mapping == "hash":
            # Checked before adding: int64 counts past the limit could wrap and crash the spread.
            kept += int(counts.sum())
            _check_total(path, line, kept, "up to this line", _CUT)
            per_task[zlib.crc32(key.encode()) % k] += counts
        else:
            total, parts = per_function.get(key, (0, []))
            nonzero = np.flatnonzero(counts)
            parts.append((nonzero, counts[nonzero]))
            per_function[key] = (total + int(counts.sum()), parts)
    if not functions:
        raise TraceFormatError(str(path), None, "no functions after the header")
    if mapping == "top":
        per_task = _top_functions(path, per_function, k, minutes)
    return _spread(path, per_task, names, rng)


def _check_header(path: Path, line: int, fields: list[str]) -> int:
    """The number of minute columns in a valid header."""
    keys = [f.lower() for f in fields[: len(FUNCTIONS_KEY_COLUMNS)]]
    if keys != [c.lower() for c in FUNCTIONS_KEY_COLUMNS]:
        raise TraceFormatError(
            str(path), line, header_problem(repr(",".join(FUNCTIONS_KEY_COLUMNS) + ",1,2,..."), fields)
        )
    minute_columns = fields[len(FUNCTIONS_KEY_COLUMNS) :]
    if not minute_columns:
        raise TraceFormatError(
            str(path), line, "the header has no minute columns after Trigger; expected 1,2,..."
        )
    for i, column in enumerate(minute_columns, start=1):
        if column != str(i):
            raise TraceFormatError(str(path), line, f"minute column {i} is named {column!r}; expected {i}")
    return len(minute_columns)


def _parse_counts(path: Path, line: int, texts: list[str]) -> IntArray:
    """The row's per-minute counts, each a whole number in [0, MAX_REQUESTS].

    The per-cell bound keeps a row's int64 sum far from wrapping around; totals over rows are
    checked as Python ints.
    """
    counts: IntArray | None
    try:
        counts = np.array(texts, dtype=np.int64)
    except (ValueError, OverflowError):
        counts = None
    if counts is None or (counts.size and (counts.min() < 0 or counts.max() > MAX_REQUESTS)):
        # Rare: parse again one by one to name the first bad minute.
        counts = np.array([_parse_count(path, line, m, t) for m, t in enumerate(texts, 1)], dtype=np.int64)
    return counts


def _parse_count(path: Path, line: int, minute: int, text: str) -> int:
    return parse_count(
        path,
        line,
        text,
        f"minute {minute}: count",
        MAX_REQUESTS,
        lambda value: (
            f"minute {minute}: count {value:,} is more than the {MAX_REQUESTS:,} invocations "
            "this tool holds in memory; check the minute columns hold invocation counts"
        ),
    )


def _check_total(path: Path, line: int | None, total: int, which: str, fix: str) -> None:
    """Refuse more invocations than fit in memory; `which` says which ones were counted."""
    if total > MAX_REQUESTS:
        raise TraceFormatError(
            str(path),
            line,
            f"{total:,} invocations {which} is more than the {MAX_REQUESTS:,} this tool holds "
            f"in memory; {fix}",
        )


def _top_functions(path: Path, per_function: dict[str, tuple[int, _Parts]], k: int, minutes: int) -> IntArray:
    """Dense per-minute counts of the k most invoked functions, most invoked first."""
    # Ties broken by the key so the choice is deterministic whatever the row order.
    ranked = sorted(per_function.items(), key=lambda item: (-item[1][0], item[0]))
    # The totals are Python ints: checked before the int64 sums below can wrap.
    kept = sum(total for _, (total, _) in ranked[:k])
    _check_total(path, None, kept, f"in the top {k} functions", f"use fewer tasks or {_CUT}")
    per_task = np.zeros((k, minutes), dtype=np.int64)
    for task, (_, (_, parts)) in enumerate(ranked[:k]):
        for index, counts in parts:
            per_task[task, index] += counts
    dropped = sum(total for _, (total, _) in ranked[k:])
    if dropped:
        log.info(
            "%s: kept the %d most invoked of %d functions, dropped %d invocations",
            path,
            min(k, len(ranked)),
            len(ranked),
            dropped,
        )
    return per_task


def _spread(path: Path, per_task: IntArray, names: tuple[str, ...], rng: np.random.Generator) -> Arrivals:
    """Arrivals uniform within each minute; the horizon is the trace's whole span of minutes."""
    if not per_task.any():
        raise TraceFormatError(str(path), None, "the selected functions have no invocations")
    minutes = np.arange(per_task.shape[1], dtype=np.float64)
    times = np.concatenate([np.repeat(minutes, row) for row in per_task])
    times = (times + rng.random(times.size)) * MINUTE_S
    tasks = np.repeat(np.arange(len(names), dtype=np.int64), per_task.sum(axis=1))
    order = np.argsort(times, kind="stable")
    return finish(path, times[order], tasks[order], names, duration_s=MINUTE_S * per_task.shape[1])
