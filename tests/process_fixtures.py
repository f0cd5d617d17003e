"""Processes read from /proc: what a stopped command may have left running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

__all__ = ["alive", "children", "in_session_or_group"]


def _stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after its name: state, ppid, pgrp, session, ...)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        yield int(entry.name), stat.rsplit(")", 1)[1].split()


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid`."""
    return {child for child, fields in _stats() if int(fields[1]) == pid}


def in_session_or_group(pid: int) -> list[int]:
    """Live (non-zombie) processes whose session or process group leader is `pid`."""
    return [p for p, fields in _stats() if fields[0] != "Z" and pid in (int(fields[2]), int(fields[3]))]


def alive(pid: int) -> bool:
    """Running, or stopped, but not gone and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
