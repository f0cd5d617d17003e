"""The generic trace format: a CSV with header `time_s,task`, one row per request.

`time_s` is seconds from the workload start; `task` is a name or an integer (integers are
kept as their canonical string form, "07" -> "7"). This is also what `dartfl workload
generate` writes, so any workload can be saved, inspected and replayed; it refuses a task name
that would read back as another one.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, TraceFormatError
from dartfl.files import replaced_when_written
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
    wanted = _canonical_names(check_task_names(task_names))
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
        task = _canonical_task(task)
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


def _canonical_task(name: str) -> str:
    """The task a `task` field names: an integer as its canonical string ("07" -> "7")."""
    return str(int(name)) if _INTEGER.fullmatch(name) else name


def _canonical_names(names: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Given task names as the file's tasks read: `--tasks 07` matches a file's `07` and `7`."""
    if names is None:
        return None
    canonical = tuple(_canonical_task(name) for name in names)
    if len(set(canonical)) != len(canonical):
        raise ConfigError(f"task names {list(names)} name the same integer task twice; give each once")
    return canonical


def write_time_task_csv(arrivals: Arrivals, path: str | Path) -> None:
    """Write arrivals as a `time_s,task` CSV (gzip-compressed if the name ends in .gz, as the
    reader expects); times keep full precision (shortest round-trip form).

    The horizon is not stored: reading the file back gives a duration equal to the last arrival.
    The file is written whole or not at all: a failed write leaves any old file as it was.
    """
    path = Path(path)
    names = arrivals.task_names
    _check_names_read_back(names)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with (
            replaced_when_written(path) as tmp,
            _text_output(tmp, gzip_as=path.name if path.suffix == ".gz" else None) as handle,
        ):
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


@contextmanager
def _text_output(path: Path, *, gzip_as: str | None) -> Iterator[TextIO]:
    """`path` opened to write text, gzip-compressed when `gzip_as` names the output to record in
    the gzip header (not the temporary `path`); mtime 0 keeps a seeded workload's file identical."""
    if gzip_as is None:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            yield handle
        return
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(gzip_as, "wb", fileobj=raw, mtime=0) as zipped,
        io.TextIOWrapper(zipped, encoding="utf-8", newline="") as handle,
    ):
        yield handle


def _check_names_read_back(names: Sequence[str]) -> None:
    """Refuse a task name the reader would turn into another (an integer not in canonical form,
    blanks around a name): the saved workload would not replay as the one generated."""
    for name in names:
        read_back = _canonical_task(name.strip())
        if read_back != name:
            raise ConfigError(
                f"task name {name!r} would read back from a time_s,task file as {read_back!r} "
                f"(integers are canonicalised, blanks stripped); name the task {read_back!r} instead"
            )
