"""Entry point of the `dartfl` command.

Each subcommand lives in its own module with a `register(subparsers)` function that adds its
parser and sets `handler` (a callable taking the parsed namespace, returning an exit code).
Exit codes: 0 ok, 1 runtime failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from dartfl import __version__
from dartfl.errors import DartflError, InputError

log = logging.getLogger(__name__)

# Modules that contribute subcommands, in the order `--help` lists them.
SUBCOMMAND_MODULES = (
    "dartfl.cli.sim_cmd",
    "dartfl.cli.policies_cmd",
    "dartfl.cli.workload_cmd",
    "dartfl.cli.fleet_cmd",
    "dartfl.cli.edge_cmd",
    "dartfl.cli.runs_cmd",
    "dartfl.cli.fl_cmd",
    "dartfl.cli.dashboard_cmd",
    "dartfl.cli.record_cmd",
    "dartfl.cli.broker_cmd",
    "dartfl.cli.dc_cmd",
)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread so that a command's cleanups run as they do
    for Ctrl-C: a spawned agent and broker stopped, temporary files removed. Commands that stop
    on a signal of their own (`edge run`, `record`) install their handlers over this one."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def _terminate_as_interrupt() -> Callable[[], None]:
    """Turn SIGTERM and SIGHUP into `Terminated` while a command runs; returns the undo. Only the
    main thread may set handlers (a caller in another thread keeps the defaults)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def undo() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return undo


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line reason (argparse prints usage + reason by default)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, _usage_error(self.prog, message))

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # Remember the innermost (sub)command that parsed, so that leftover arguments are
        # reported against `dartfl sim --help`, not the top level's `dartfl --help`.
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, _PROG):
            setattr(parsed, _PROG, self.prog)
        return parsed, extras


_PROG = "_innermost_prog"  # popped in main(): commands record their namespace in the run store


# The optional dependencies a command may import when it runs, by top-level module, and the
# extra of pyproject.toml that brings each (the core installs none of them).
_EXTRA_OF_MODULE = {
    "paho": "edge",
    "torch": "edge",
    "onnx": "edge",
    "onnxruntime": "edge",
    "mlxtend": "edge",
    "sklearn": "edge",
    "flwr": "fl",
    "ray": "fl",
    "streamlit": "dashboard",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line fix for a command that imported an optional dependency that is not
    installed, or None where the missing module is not one (a fault of ours: let it show)."""
    module = (exc.name or "").split(".")[0]
    extra = _EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return f"{module} is not installed; this command needs the {extra!r} extra: pip install 'dartfl[{extra}]'"


def _usage_error(prog: str, message: str) -> str:
    return f"dartfl: error: {message} (see `{prog} --help`)\n"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dartfl", description="DART-FL: co-schedule inference and federated training.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    parser.add_argument("--version", action="version", version=f"dartfl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a subcommand not built yet
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
    except SystemExit as done:  # --help, or a flag argparse refused: an exit code like the rest
        return done.code if isinstance(done.code, int) else 0
    prog = vars(args).pop(_PROG, parser.prog)
    if extras:
        print(_usage_error(prog, f"unrecognized arguments: {' '.join(extras)}"), end="", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    undo_signals = _terminate_as_interrupt()
    try:
        code = int(handler(args))
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        # `dartfl ... --json | head`: stop quietly, as other Unix tools do, with the exit status
        # of a process that SIGPIPE ended; stdout goes to /dev/null so the flush at exit is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except InputError as exc:
        print(f"dartfl: error: {exc}", file=sys.stderr)
        return 2
    except DartflError as exc:
        print(f"dartfl: failed: {exc}", file=sys.stderr)
        return 1
    except Terminated as stop:
        print(f"dartfl: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print("dartfl: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        fix = missing_extra(exc)
        if fix is None:
            raise
        print(f"dartfl: failed: {fix}", file=sys.stderr)
        return 1
    finally:
        undo_signals()


if __name__ == "__main__":
    sys.exit(main())
