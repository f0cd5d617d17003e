"""Reading trace files: opening, row iteration with line numbers, and the checks all readers share.

Every problem becomes a TraceFormatError naming the file, the 1-based line (the header is
line 1) and what is wrong, so a user can open the file at that line and fix it.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, TraceFormatError
from workloads._common import MAX_REQUESTS, FloatArray, IntArray

__all__ = [
    "DEFAULT_TASK_NAMES",
    "MAX_TOKENS",
    "check_task_names",
    "data_rows",
    "finish",
    "first_line",
    "header_problem",
    "parse_count",
    "parse_time",
    "parse_tokens",
    "read_once",
    "rows",
]

log = logging.getLogger(__name__)

# The tasks of the project's reference setup; traces without task labels map onto these.
DEFAULT_TASK_NAMES: tuple[str, ...] = ("digits", "fashion", "uci-digits")
# Most tokens one LLM request may read or write. Context windows are at most about 10 M tokens
# (2025), so a larger count is a corrupt field; the bound also keeps counts in int64.
MAX_TOKENS = 10**9
# Bytes read at a time when looking for the line that holds a byte that is not UTF-8.
_SCAN_BLOCK = 1 << 20
# The temporary copy of each stream (pipe) `read_once` holds, opened in its place by `_open`.
_COPIES: dict[Path, Path] = {}


@contextmanager
def read_once(path: Path) -> Iterator[None]:
    """While held, every reading of `path` here reads one copy of it if it is a stream.

    A pipe (`/dev/stdin`, a shell's `<(...)`) gives its content to its first reader only, and
    loading a trace reads the file twice (the header names the format, then the reader runs).
    Errors and log lines still name `path`, not the copy. A regular file is read in place.
    """
    if path in _COPIES or not _is_stream(path):
        yield
        return
    _COPIES[path] = _copy_to_temporary(path)
    try:
        yield
    finally:
        _COPIES.pop(path).unlink(missing_ok=True)


def _is_stream(path: Path) -> bool:
    """Neither a regular file nor a directory; a path that cannot be looked up is left to `_open`
    to name."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _copy_to_temporary(path: Path) -> Path:
    """The stream's bytes in a new file of the system's temporary folder (the caller deletes it)."""
    fd, name = tempfile.mkstemp(prefix="dartfl-trace-")
    try:
        with os.fdopen(fd, "wb") as copy, open(path, "rb") as stream:
            shutil.copyfileobj(stream, copy, _SCAN_BLOCK)
    except OSError as exc:
        Path(name).unlink(missing_ok=True)
        raise TraceFormatError(
            str(path), None, f"cannot copy the stream to a temporary file: {exc.strerror or exc}"
        ) from None
    return Path(name)


@contextmanager
def _open(path: Path) -> Iterator[TextIO]:
    """Open a text trace (gzip if the name ends in .gz), turning OS errors into TraceFormatError.

    Opened outside a `with` so only opening errors are translated here; the handle is closed below.
    """
    source = _COPIES.get(path, path)
    try:
        if path.suffix == ".gz":
            handle: TextIO = gzip.open(source, "rt", encoding="utf-8-sig", newline="")  # noqa: SIM115
        else:
            handle = open(source, encoding="utf-8-sig", newline="")  # noqa: SIM115
    except FileNotFoundError:
        raise TraceFormatError(str(path), None, "no such file; check the path") from None
    except IsADirectoryError:
        raise TraceFormatError(str(path), None, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceFormatError(str(path), None, f"cannot open: {exc.strerror or exc}") from None
    with handle:
        yield handle


def rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) for every non-blank CSV row, the header included."""
    with _open(path) as handle:
        reader = csv.reader(handle, strict=True)
        line = 1
        try:
            for fields in reader:
                line = reader.line_num
                stripped = [f.strip() for f in fields]
                if any(stripped):
                    yield line, stripped
        except UnicodeDecodeError:
            bad = _line_of_bad_byte(path)
            raise TraceFormatError(str(path), bad, "not UTF-8 text; is this a CSV file?") from None
        except csv.Error as exc:
            raise TraceFormatError(str(path), reader.line_num, f"malformed CSV: {exc}") from None
        except (OSError, EOFError) as exc:  # a corrupt .gz shows up while reading
            raise TraceFormatError(str(path), None, f"cannot read: {exc}") from None


def _line_of_bad_byte(path: Path) -> int | None:
    """The line holding the first byte that is not UTF-8, found in a second, binary pass only
    once decoding failed: the text reader decodes in blocks ahead of the CSV reader, so the CSV
    reader's count is off by up to a block's lines. None for a stream, which cannot be reread."""
    source = _COPIES.get(path, path)
    if _is_stream(source):
        return None
    line = 1
    try:
        with _open_binary(path, source) as handle:
            pending = b""
            while block := handle.read(_SCAN_BLOCK):
                data = pending + block
                # Whole lines only: the bytes of a character never include a newline.
                end = data.rfind(b"\n") + 1
                bad = _bad_byte_line(data[:end], line)
                if bad is not None:
                    return bad
                line += _line_breaks(data[:end])
                pending = data[end:]
            return _bad_byte_line(pending, line)
    except (OSError, EOFError):
        return None


def _open_binary(path: Path, source: Path) -> io.BufferedIOBase:
    """`source` (the file `path` names, or its copy) for bytes, unpacked when `path` ends in .gz."""
    if path.suffix == ".gz":
        return gzip.open(source, "rb")
    return open(source, "rb")


def _bad_byte_line(data: bytes, first_line: int) -> int | None:
    """The line of the first byte of `data` (which starts at line `first_line`) that is not UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return first_line + _line_breaks(data[: exc.start])
    return None


def _line_breaks(data: bytes) -> int:
    """Line ends as the CSV reader counts them (newline=""): \n, \r\n and a lone \r."""
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def first_line(path: Path) -> tuple[int, list[str]]:
    """The first non-blank row (normally the header); an empty file is an error."""
    for line, fields in rows(path):
        return line, fields
    raise TraceFormatError(str(path), 1, "file is empty; expected a header line")


def data_rows(path: Path, header: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    """The rows after the header, which must be `header` (letter case and blanks around a name
    aside); a missing or other header is a TraceFormatError naming the expected one."""
    it = rows(path)
    for line, fields in it:
        if [f.strip().lower() for f in fields] != [h.lower() for h in header]:
            raise TraceFormatError(str(path), line, header_problem(repr(",".join(header)), fields))
        break
    else:
        raise TraceFormatError(str(path), 1, f"file is empty; expected the header {','.join(header)!r}")
    return it


def header_problem(expected: str, fields: list[str]) -> str:
    """Why a first line is not the header `expected` (one or more quoted headers); data gets a hint."""
    got = ",".join(fields)
    if not _looks_like_data(fields[0]):
        return f"unrecognised header {got!r}; expected {expected}"
    return f"missing header: the first line {got!r} looks like data; add a header line, {expected}"


def _looks_like_data(field: str) -> bool:
    """Column names start with a letter; times, timestamps and hashes of data rows mostly do not."""
    try:
        float(field)
    except ValueError:
        return field[:1].isdigit()
    return True


def parse_time(path: Path, line: int, text: str, column: str) -> float:
    """A finite, non-negative number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(str(path), line, f"{column} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceFormatError(str(path), line, f"{column} must be finite and >= 0, got {text!r}")
    return value


def parse_count(
    path: Path, line: int, text: str, label: str, most: int, too_many: Callable[[int], str]
) -> int:
    """A whole number in [0, most] (`label` names it in errors; `too_many(value)` says what a
    larger one means and how to check it)."""
    try:
        value = int(text)
    except ValueError:
        raise TraceFormatError(str(path), line, f"{label} {text!r} is not a whole number") from None
    if value < 0:
        raise TraceFormatError(str(path), line, f"{label} must be >= 0, got {value}")
    if value > most:
        raise TraceFormatError(str(path), line, too_many(value))
    return value


def parse_tokens(path: Path, line: int, text: str, column: str) -> int:
    """A token count of an LLM trace: a whole number in [0, MAX_TOKENS]."""
    return parse_count(
        path,
        line,
        text,
        column,
        MAX_TOKENS,
        lambda value: (
            f"{column} {value} is too large: a request has at most {MAX_TOKENS:,} tokens; "
            "check the column holds token counts"
        ),
    )


def check_task_names(task_names: Sequence[str] | None) -> tuple[str, ...] | None:
    """Validate caller-supplied task names (None stays None: the reader picks its default)."""
    if task_names is None:
        return None
    names = tuple(task_names)
    if not names or not all(names) or len(set(names)) != len(names):
        raise ConfigError(f"task names must be a non-empty list of unique names, got {list(names)}")
    return names


def finish(
    path: Path,
    times: FloatArray,
    tasks: IntArray,
    task_names: tuple[str, ...],
    duration_s: float | None = None,
) -> Arrivals:
    """Sort (with a log line: traces are often merged from several sources) and wrap the arrivals."""
    if times.size > MAX_REQUESTS:
        raise TraceFormatError(
            str(path),
            None,
            f"{times.size:,} requests is more than the {MAX_REQUESTS:,} this tool holds in memory",
        )
    if times.size > 1:
        unsorted = int(np.count_nonzero(np.diff(times) < 0))
        if unsorted:
            log.warning("%s: %d arrivals were out of time order; sorted them by time", path, unsorted)
            order = np.argsort(times, kind="stable")
            times, tasks = times[order], tasks[order]
    end = float(times[-1]) if times.size else 0.0
    return Arrivals(times, tasks, task_names, end if duration_s is None else max(duration_s, end))
