"""Where DART-FL keeps its files on this machine (stdlib only)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["STORE_ENV", "default_store_path"]

STORE_ENV = "DARTFL_STORE"


def default_store_path() -> Path:
    """The run store: $DARTFL_STORE, else $XDG_DATA_HOME/dartfl/runs.sqlite, else ~/.local/share/..."""
    explicit = os.environ.get(STORE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "dartfl" / "runs.sqlite"
