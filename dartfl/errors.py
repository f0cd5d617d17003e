"""The one error hierarchy of DART-FL.

Every message names the bad value and says how to fix it; the CLI maps
`InputError` subclasses to exit code 2 and anything else to exit code 1.
"""

from __future__ import annotations

__all__ = ["ConfigError", "DartflError", "InputError", "PolicyError", "ProtocolError", "TraceFormatError"]


class DartflError(Exception):
    """Root of every error DART-FL raises on purpose."""


class InputError(DartflError):
    """The user gave something unusable (a flag, a file, a payload)."""


class ConfigError(InputError):
    """A configuration value, profile or policy name is invalid."""


class PolicyError(DartflError):
    """A policy failed while it ran: it raised, or decided something that is not an
    Allocation (a plugin's bug, docs/plugins.md); the message names the policy and where."""


class TraceFormatError(InputError):
    """A workload or trace file cannot be read; the message names file, line and problem."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


class ProtocolError(InputError):
    """A message on the wire is malformed; `code` is the protocol's error code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
