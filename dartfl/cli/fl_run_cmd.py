"""`dartfl fl run` and `dartfl fl app`: a federated run on a SuperLink that is already up
(docs/deployment.md section 4), and the Flower app written out for Flower's own workflow.

    dartfl fl run --superlink superlink.example:8000 --root-certificates ca.crt --set num-server-rounds=20

`run` prints the run id, follows the ServerApp's log (stderr) until the run ends, and says where
the results, checkpoints and run-store records went (paths on the SuperLink's host). `app DIR`
writes the app's pyproject.toml (`cd DIR && flwr run . --stream`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from dartfl.cli.run_config_args import add_set_argument, parse_sets, reject_unknown_keys
from dartfl.errors import ConfigError, DartflError

__all__ = ["NO_STORE", "check_timeout_s", "register_app", "register_run"]

NO_STORE = "none"  # fltask.config.NO_STORE: imported lazily there (it pulls in the policies)


def register_run(fl_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = fl_sub.add_parser(
        "run",
        help="start a federated run on a running SuperLink (this machine or a remote one)",
        description="Submit DART-FL's Flower app to a SuperLink's Control API and follow it.",
    )
    run.add_argument(
        "--superlink",
        required=True,
        metavar="HOST:PORT",
        help="the SuperLink's HTTP port (default port 8000)",
    )
    trust = run.add_mutually_exclusive_group()
    trust.add_argument(
        "--root-certificates", type=Path, metavar="PEM", help="CA that signed the SuperLink's TLS certificate"
    )
    trust.add_argument("--insecure", action="store_true", help="plain HTTP (a SuperLink run with --insecure)")
    add_set_argument(
        run,
        help="a run-config key of docs/fl-config.md (repeatable); results-file, checkpoint-dir "
        "and store as absolute paths on the SuperLink's host",
    )
    follow = run.add_mutually_exclusive_group()
    follow.add_argument("--detach", action="store_true", help="print the run id and return at once")
    follow.add_argument("--no-stream", action="store_true", help="wait for the end without printing the log")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.add_argument("--timeout-s", type=float, default=86400.0, help="give up waiting after this long")
    run.set_defaults(handler=_run_remote)


def register_app(fl_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    app = fl_sub.add_parser(
        "app",
        help="write the Flower app (pyproject.toml) into DIR, for `flwr run DIR`",
        description="Write DART-FL's Flower app into DIR: its components and run-config defaults, "
        "no code (every host runs its installed dartfl). Then: cd DIR && flwr run . --stream",
    )
    app.add_argument("directory", type=Path, metavar="DIR", help="where to write pyproject.toml")
    add_set_argument(app, help="a run-config default (repeatable)")
    app.add_argument("--force", action="store_true", help="replace DIR/pyproject.toml if it exists")
    app.set_defaults(handler=_write_app)


def check_timeout_s(timeout_s: float) -> None:
    """--timeout-s of the `fl` commands: a finite number of seconds > 0."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"--timeout-s must be a finite number > 0 (seconds), got {timeout_s:g}")


def _write_app(args: argparse.Namespace) -> int:
    from edge_client.agent_config import check_agent_policy
    from orchestration.flower_app import APP_FILE, write_app

    target = args.directory / APP_FILE
    if target.exists() and not args.force:
        raise ConfigError(f"{target} exists; pass --force to replace it, or give another DIR")
    if args.directory.exists() and not args.directory.is_dir():
        raise ConfigError(f"{args.directory} is a file; give a directory")
    overrides = parse_sets(args.set)
    if "policy" in overrides:  # a deployment's agents would refuse it, after the SuperLink started
        loss_weighting = str(overrides.get("loss-weighting", "")) or None
        check_agent_policy(str(overrides["policy"]), loss_weighting)
    try:
        write_app(args.directory, overrides)
    except OSError as exc:
        raise ConfigError(
            f"cannot write {target}: {exc.strerror or exc}; give a DIR that is or can be made a "
            "writable directory"
        ) from None
    print(f"wrote {target}; run it with the venv active: cd {args.directory} && flwr run . --stream")
    return 0


def _run_remote(args: argparse.Namespace) -> int:
    import logging

    from orchestration.remote_run import SuperLinkTarget, submit_run

    check_timeout_s(args.timeout_s)
    target = SuperLinkTarget.parse(
        args.superlink, root_certificates=args.root_certificates, insecure=args.insecure
    )
    if args.insecure and not target.is_loopback:
        # The SuperLink itself must run with --insecure for this to work at all, so refusing here
        # protects nothing; say what it means and go on.
        logging.getLogger(__name__).warning(
            "--insecure: the app and its run config go to %s unencrypted and unauthenticated", target.address
        )
    overrides = parse_sets(args.set)
    cfg = _checked_run_config(overrides)
    print(f"dartfl fl run: submitting to {target.address}", file=sys.stderr)

    started: list[int] = []

    def announce(run_id: int) -> None:
        started.append(run_id)
        if not args.json:
            print(f"run {run_id} started on {target.address}", flush=True)

    try:
        submitted = submit_run(
            target,
            overrides,
            wait=not args.detach,
            timeout_s=args.timeout_s,
            on_log=None if args.no_stream or args.json else lambda line: print(line, file=sys.stderr),
            on_run_id=announce,
        )
    except KeyboardInterrupt:
        if started:
            print(
                f"dartfl fl run: stopped following run {started[0]}; it goes on on the SuperLink",
                file=sys.stderr,
            )
        raise
    recorded = "" if cfg.store.strip().lower() == NO_STORE else cfg.store or "default"
    outputs = {"results-file": cfg.results_file, "checkpoint-dir": cfg.checkpoint_dir, "store": recorded}
    if args.json:
        result = {"run_id": submitted.run_id, "superlink": target.address, "status": submitted.status}
        print(json.dumps({**result, **{key: value or None for key, value in outputs.items()}}))
    elif submitted.status is not None:
        print(f"run {submitted.run_id}: {submitted.status}")
        if recorded == "default":
            outputs["store"] = "the default run store ($DARTFL_STORE, else ~/.local/share/dartfl/runs.sqlite)"
        for key, value in outputs.items():
            if value:
                print(f"{key}: {value} (on the SuperLink's host)")
        if not any(outputs.values()):
            print("no results-file, checkpoint-dir or store set: the summary is only in the log")
    if submitted.status is not None and not submitted.completed:
        raise DartflError(f"run {submitted.run_id} on {target.address} ended {submitted.status}; see its log")
    return 0


def _checked_run_config(overrides: dict[str, int | float | str]) -> Any:
    """The run's FlConfig as the ServerApp will parse it; ConfigError for unknown keys or bad values."""
    from fltask.config import FlConfig

    reject_unknown_keys(overrides)
    for key in ("results-file", "checkpoint-dir", "store"):
        path = str(overrides.get(key, ""))
        if path and not Path(path).is_absolute():
            # The ServerApp writes them on the SuperLink's host, from a working directory of its own.
            raise ConfigError(f"{key}={path!r}: give an absolute path on the SuperLink's host")
    return FlConfig.from_run_config(overrides)
