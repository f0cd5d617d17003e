"""Child processes of a process, read from /proc: what a stopped command may have left running."""

from __future__ import annotations

from pathlib import Path

__all__ = ["alive", "children"]


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (field 4 of /proc/PID/stat is the parent's pid)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running, or stopped, but not gone and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
