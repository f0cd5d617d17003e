"""The generic trace format: a CSV with header `time_s,task`, one row per request.

`time_s` is seconds from the workload start; `task` is a name or an integer (integers are
kept as their canonical string form, "07" -> "7"). This is also what `dartfl workload
generate` writes, so any workload can be saved, inspected and replayed.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, TraceFormatError
from workloads.traces._io import check_task_names, finish, header_problem, parse_time, rows

__all__ = ["TIME_TASK_HEADER", "read_time_task_csv", "write_time_task_csv"]

TIME_TASK_HEADER: tuple[str, str] = ("time_s", "task")
_INTEGER = re.compile(r"[+-]?\d+")
# time_s counts from the trace's start, so a first arrival this late (over 3 years in) is a Unix
# timestamp; taken as an offset it would make a horizon of decades that nothing can simulate.
UNIX_TIME_S = 1e8


def read_time_task_csv(path: str | Path, task_names: Sequence[str] | None = None) -> Arrivals:
    """Read a `time_s,task` CSV.

    Task names are taken in order of first appearance, unless `task_names` is given: then the
    arrivals use that order (so indices match across files) and every task in the file must be
    one of them. Rows out of time order are sorted, with a warning in the log.
    """
    path = Path(path)
    wanted = check_task_names(task_names)
    index: dict[str, int] = {name: i for i, name in enumerate(wanted or ())}
    times: list[float] = []
    tasks: list[int] = []
    it = rows(path)
    for line, fields in it:
        if tuple(f.lower() for f in fields) != TIME_TASK_HEADER:
            raise TraceFormatError(str(path), line, header_problem("'time_s,task'", fields))
        break
    else:
        raise TraceFormatError(str(path), 1, "file is empty; expected the header 'time_s,task'")
    for line, fields in it:
        if len(fields) != 2:
            raise TraceFormatError(str(path), line, f"expected 2 columns (time_s,task), got {len(fields)}")
        time_text, task = fields
        if not task:
            raise TraceFormatError(str(path), line, "task is empty; give a task name or number")
        if _INTEGER.fullmatch(task):
            task = str(int(task))
        k = index.get(task)
        if k is None:
            if wanted is not None:
                raise TraceFormatError(
                    str(path), line, f"task {task!r} is not one of the given task names {list(wanted)}"
                )
            k = index[task] = len(index)
        times.append(parse_time(path, line, time_text, "time_s"))
        tasks.append(k)
    if not times:
        raise TraceFormatError(str(path), None, "no requests after the header")
    _reject_unix_time(path, min(times))
    names = tuple(index)
    return finish(path, np.array(times, dtype=np.float64), np.array(tasks, dtype=np.int64), names)


def _reject_unix_time(path: Path, first_s: float) -> None:
    if first_s > UNIX_TIME_S:
        raise TraceFormatError(
            str(path),
            None,
            f"the first arrival is at time_s={first_s:.17g}, which looks like Unix time; time_s is "
            "seconds from the trace's start: subtract the first timestamp from every row",
        )


def write_time_task_csv(arrivals: Arrivals, path: str | Path) -> None:
    """Write arrivals as a `time_s,task` CSV; times keep full precision (shortest round-trip form).

    The horizon is not stored: reading the file back gives a duration equal to the last arrival.
    """
    path = Path(path)
    names = arrivals.task_names
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(TIME_TASK_HEADER)
            writer.writerows(
                zip(
                    map(repr, arrivals.times_s.tolist()),
                    [names[k] for k in arrivals.tasks.tolist()],
                    strict=True,
                )
            )
    except OSError as exc:
        raise ConfigError(
            f"cannot write {path}: {exc.strerror or exc}; check the directory is writable"
        ) from None
