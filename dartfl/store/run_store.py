"""`RunStore`: one open run store with the methods of every table."""

from __future__ import annotations

from dartfl.store.runs import RunTables
from dartfl.store.telemetry import TelemetryTable

__all__ = ["RunStore"]


class RunStore(RunTables, TelemetryTable):
    """An open run store. Use as a context manager, or call `close()`."""
