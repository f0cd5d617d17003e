"""Output files written whole or not at all, and paths looked up without a traceback (stdlib only)."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dartfl.errors import ConfigError

__all__ = ["exists_or_explain", "path_problem", "replaced_when_written"]

# Linux's NAME_MAX: a temporary name longer than this fails where the output's own name would not.
_NAME_MAX = 255
_TMP_PREFIX = ".tmp-"


@contextmanager
def replaced_when_written(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed over `path` once the block ends without
    error, removed when it raises. A failed write (a full disk) thus leaves the old file, or none,
    instead of a truncated one. The temporary keeps the name's ending, so a writer that picks its
    format from the suffix (matplotlib) still does.

    A file that is not a regular one (/dev/stdout, a FIFO) cannot be replaced: it is written directly.
    """
    try:
        info: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        yield path
        return
    tmp = path.with_name(_temporary_name(path.name))
    try:
        yield tmp
        if info is not None:  # an overwritten file keeps its permissions, as an in-place write would
            os.chmod(tmp, stat.S_IMODE(info.st_mode))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _temporary_name(name: str) -> str:
    """A hidden, unique name ending like `name`, cut from the front to stay within NAME_MAX."""
    prefix = f"{_TMP_PREFIX}{secrets.token_hex(4)}-"
    room = _NAME_MAX - len(prefix.encode())
    while len(name.encode()) > room:
        name = name[1:]
    return prefix + name


def exists_or_explain(path: Path, what: str) -> bool:
    """Whether `path` exists; a path the system cannot look up (a name too long, a folder that
    may not be searched) is a ConfigError naming it, where Path.exists raises a bare OSError."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {path_problem(exc)}") from None
    return True


def path_problem(exc: OSError) -> str:
    """Why the system refused a path, with the fix where there is one to say."""
    if exc.errno == errno.ENAMETOOLONG:
        return (
            f"the name is too long ({os.strerror(exc.errno)}: at most {_NAME_MAX} bytes a file or "
            "folder name); pick a shorter one"
        )
    return f"{exc.strerror or exc}; pick another path"
