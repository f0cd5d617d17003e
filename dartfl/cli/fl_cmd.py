"""`dartfl fl`: federated multitask learning on Flower.

    dartfl fl sim --clients 6 --rounds 12 --policy dart --policy inference-first --seed 1 --json

`sim` starts its own simulation SuperLink on a free loopback port, runs the packaged Flower app
(orchestration.flower_app) once per policy through `flwr run` (Ray runs the virtual clients,
so call it under `scripts/loopback-run`), shows the ServerApp's line per round on stderr, stops
the SuperLink, and prints one row per policy. A policy brings its natural loss weighting (dart:
demand, the baselines: uniform); --loss-weights overrides it.
`deploy-local` is the real deployment on loopback (docs/deployment.md):

    dartfl fl deploy-local --clients 2 --rounds 2 --json

It starts a SuperLink, one Mosquitto, and per device a `dartfl edge run` agent with its round
channel on 127.0.0.1 and a SuperNode whose node config points at it; replays requests to every
agent while Flower runs the rounds; reports per round the server's time, the slowest client's
own time (handover to update on the agent) and their difference, the deployment overhead;
and stops every process it started, also on failure. `--kill-node 1 --kill-phase uploading`
makes it a fault test (a SuperNode SIGKILLed mid-round; docs/deployment.md section 6).
`run` starts a run on a SuperLink that is already running, on this machine or another
(docs/deployment.md section 4):

    dartfl fl run --superlink superlink.example:8000 --root-certificates ca.crt --set num-server-rounds=20

It prints the run id, follows the ServerApp's log (stderr) until the run ends, and says where
the results, checkpoints and run-store records went (paths on the SuperLink's host). `app DIR`
writes the app's pyproject.toml for Flower's own workflow (`cd DIR && flwr run . --stream`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from dartfl.cli.sim_cmd import add_store_arguments
from dartfl.cli.workload_args import seed_arg
from dartfl.errors import ConfigError, DartflError
from dartfl.paths import default_store_path

__all__ = ["register"]

DEFAULT_POLICIES = ("dart", "inference-first")
NO_STORE = "none"  # fltask.config.NO_STORE: imported lazily there (it pulls in the policies)
# The ServerApp's first line (which dartfl it runs) and its line per round (server.rounds).
_ROUND_LINE = re.compile(r"DART-FL \S+ ServerApp \(.*|round \d+/\d+: .*")
# The headline experiment's fleet (docs/experiments.md); each can be overridden with --set KEY=VALUE.
HEADLINE: dict[str, int | float | str] = {
    "zipf": 2.0,
    "favourite-tasks": "fashion,fashion,fashion,digits,fashion,uci-digits",
    "max-train-per-task": 20000,
    "max-test-per-task": 10000,
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fl = sub.add_parser("fl", help="federated multitask learning on Flower (simulation, deployment)")
    fl_sub = fl.add_subparsers(dest="fl_command", metavar="ACTION")
    sim = fl_sub.add_parser("sim", help="Flower simulation: virtual-time devices, real training")
    sim.add_argument("--clients", type=int, default=6, help="virtual clients (SuperNodes), default 6")
    sim.add_argument("--rounds", type=int, default=12, help="federated rounds, default 12")
    sim.add_argument(
        "--policy",
        action="append",
        metavar="P",
        help="co-scheduling policy (repeatable); default: dart, inference-first",
    )
    sim.add_argument(
        "--loss-weights", choices=("uniform", "demand"), help="override every policy's loss weighting"
    )
    sim.add_argument("--seed", type=seed_arg, default=1, help="random seed of the run (default 1)")
    sim.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any run-config key (pyproject.toml)"
    )
    sim.add_argument("--json", action="store_true", help="print one JSON object {results: [...]}")
    add_store_arguments(sim)
    sim.add_argument("--plot-dir", type=Path, help="write per-task accuracy, SLO and harvest plots here")
    sim.add_argument("--timeout-s", type=float, default=900.0, help="limit per policy run (wall clock)")
    sim.set_defaults(handler=_sim)

    dep = fl_sub.add_parser(
        "deploy-local",
        help="real deployment on loopback: SuperLink, SuperNodes, device agents, Mosquitto, a replay",
    )
    dep.add_argument("--clients", type=int, default=2, help="devices (SuperNode + agent each), default 2")
    dep.add_argument("--rounds", type=int, default=2, help="federated rounds, default 2")
    dep.add_argument("--round-s", type=float, default=5.0, help="training time per round (default 5 s)")
    dep.add_argument("--policy", default="dart", help="the agents' allocation policy (default dart)")
    dep.add_argument("--rate", type=float, default=20.0, help="replayed requests/s per device (default 20)")
    dep.add_argument(
        "--max-train", type=int, default=1000, help="training samples per task per agent (default 1000)"
    )
    dep.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any run-config key (pyproject.toml)"
    )
    dep.add_argument("--workdir", type=Path, help="keep logs, checkpoints and results here (default: temp)")
    dep.add_argument("--json", action="store_true", help="print one JSON object")
    dep.add_argument("--timeout-s", type=float, default=600.0, help="limit for the federated run")
    dep.add_argument(
        "--kill-node",
        type=int,
        metavar="I",
        help="fault test: SIGKILL device I's SuperNode in its first round (the run goes on without it)",
    )
    dep.add_argument(
        "--kill-phase",
        choices=("training", "uploading"),
        default="training",
        help="when --kill-node strikes: while its agent trains (default), or once the SuperLink "
        "has its reply but not yet the reply's objects",
    )
    dep.set_defaults(handler=_deploy_local)
    _register_run(fl_sub)
    _register_app(fl_sub)

    def _usage(_args: argparse.Namespace) -> int:
        fl.print_help()
        return 2

    fl.set_defaults(handler=_usage)


def _parse_sets(items: list[str]) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        value: int | float | str
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                value = text
        out[key.strip()] = value
    return out


# Run-config keys that `fl sim` / `deploy-local` set from their own flags or keep to
# themselves; a --set of one would be overridden without notice.
_SIM_OWNED = {
    "policy": "--policy",
    "num-server-rounds": "--rounds",
    "seed": "--seed",
    "min-available-nodes": "--clients",
    "store": "--store / --no-store",
    "results-file": "--json (fl sim keeps its results files to itself)",
    "checkpoint-dir": "nothing (fl sim checkpoints into a scratch directory)",
}
_DEPLOY_OWNED = {
    "policy": "--policy",
    "num-server-rounds": "--rounds",
    "min-available-nodes": "--clients",
    "round-deadline-s": "--round-s",
    "results-file": "--workdir (deploy-local writes WORKDIR/result.json)",
}


def _checked_sets(items: list[str], owned: dict[str, str]) -> dict[str, int | float | str]:
    """The --set overrides; ConfigError for an unknown key or one the command's flags own."""
    overrides = _parse_sets(items)
    _reject_unknown_keys(overrides)
    for key in overrides:
        if key in owned:
            raise ConfigError(f"--set {key}=... is not taken here; use {owned[key]}")
    return overrides


def _sim(args: argparse.Namespace) -> int:
    from fltask.config import FlConfig
    from orchestration.flower_processes import LocalSuperLink, flwr_run, scratch_dir

    if args.clients < 1 or args.rounds < 1:
        raise ConfigError(f"--clients and --rounds must be >= 1, got {args.clients} and {args.rounds}")
    if args.plot_dir is not None and args.plot_dir.exists() and not args.plot_dir.is_dir():
        raise ConfigError(f"--plot-dir {args.plot_dir} is a file; give a directory")
    policies = args.policy or list(DEFAULT_POLICIES)
    base: dict[str, int | float | str] = {**HEADLINE, **_checked_sets(args.set, _SIM_OWNED)}
    base.update({"num-server-rounds": args.rounds, "seed": args.seed, "min-available-nodes": args.clients})
    if args.loss_weights:
        base["loss-weighting"] = args.loss_weights
    configs = [FlConfig.from_run_config({**base, "policy": p}) for p in policies]  # fail fast on bad input
    results: list[dict[str, Any]] = []
    with scratch_dir() as work, LocalSuperLink(work, simulation=True) as superlink:
        conn, env = superlink.name, superlink.env
        for i, cfg in enumerate(configs):
            run_config: dict[str, int | float | str] = {**base, "policy": cfg.policy}
            run_config["results-file"] = str(work / f"result-{i}.json")
            run_config["checkpoint-dir"] = str(work / f"ckpt-{i}")
            run_config["store"] = (
                NO_STORE if args.no_store else str((args.store or default_store_path()).resolve())
            )
            print(
                f"dartfl fl sim: running {cfg.policy} ({args.clients} clients x {args.rounds} rounds)",
                file=sys.stderr,
            )
            flwr_run(
                conn,
                env,
                run_config,
                federation_config=f"num-supernodes={args.clients} client-resources-num-cpus=1",
                timeout_s=args.timeout_s,
                log_path=work / f"flwr-run-{i}.log",
                on_line=_show_progress,
            )
            result_path = work / f"result-{i}.json"
            if not result_path.is_file():
                raise ConfigError(f"the run of {cfg.policy} wrote no results (see `flwr run` output)")
            results.append(json.loads(result_path.read_text()))
    if args.plot_dir:
        _plot_results(results, args.plot_dir)
    if args.json:
        print(json.dumps({"results": results}))
    else:
        _print_table(results)
    return 0


def _show_progress(line: str) -> None:
    """The ServerApp's progress (`_ROUND_LINE`), from the run's log, on stderr."""
    if (found := _ROUND_LINE.search(line)) is not None:
        print(f"dartfl fl sim: {found.group(0)}", file=sys.stderr, flush=True)


def _print_table(results: list[dict[str, Any]]) -> None:
    from dartfl.cli.tables import cell

    tasks = list(results[0]["accuracy_per_task"]) if results else []
    head = [
        "policy",
        "rounds",
        *[f"acc {t}" for t in tasks],
        "mean acc",
        "demand-w acc",
        "SLO",
        "SLO inf-only",
        "harvest",
    ]
    print(" | ".join(head))
    for r in results:
        cells = [
            f"{r['policy']}+{r['loss_weighting']}",
            str(r["rounds"]),
            *[f"{r['accuracy_per_task'][t]:.4f}" for t in tasks],
            f"{r['mean_accuracy']:.4f}",
            f"{r['demand_weighted_accuracy']:.4f}",
            f"{r['slo_attainment']:.4f}",
            f"{r['slo_attainment_inference_only']:.4f}",
            cell(r["harvest_efficiency"], ".3f"),
        ]
        print(" | ".join(cells))


def _plot_results(results: list[dict[str, Any]], out_dir: Path) -> None:
    """fl-accuracy.png (per-task accuracy per round, one panel per task) and fl-slo-harvest.png."""
    from dartfl.cli.plots import pyplot

    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = list(results[0]["accuracy_per_task"]) if results else []
    fig, axes = plt.subplots(1, len(tasks) + 1, figsize=(4 * (len(tasks) + 1), 3.2), sharey=True)
    for r in results:
        label = f"{r['policy']}+{r['loss_weighting']}"
        rounds = [h["round"] for h in r["history"]]
        for ax, task in zip(axes, tasks, strict=False):
            ax.plot(rounds, [h["accuracy_per_task"][task] for h in r["history"]], marker=".", label=label)
            ax.set_title(task)
        axes[-1].plot(rounds, [h["demand_weighted_accuracy"] for h in r["history"]], marker=".", label=label)
        axes[-1].set_title("demand-weighted")
    for ax in axes:
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[-1].legend()
    fig.tight_layout()
    fig.savefig(out_dir / "fl-accuracy.png", dpi=120)
    plt.close(fig)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = [f"{r['policy']}+{r['loss_weighting']}" for r in results]
    slo = ax1.bar(names, [r["slo_attainment"] for r in results], color="C0", label="the policy's run")
    ax1.bar_label(slo, fmt="%.3f", fontsize=8, label_type="center", color="white")  # off the line
    handles = [slo]
    if results:  # the same clients serving only: the attainment training costs is the gap
        ref = results[0]["slo_attainment_inference_only"]
        handles.append(ax1.axhline(ref, color="k", ls="--", lw=1, label=f"inference only ({ref:.3f})"))
    ax1.set_ylabel("SLO attainment")
    ax1.set_ylim(0.0, 1.12)  # room above 1.0: a reference line at 1 stays visible
    harvest = ax2.bar(names, [r["harvest_efficiency"] for r in results], color="C2")
    ax2.bar_label(harvest, fmt="%.3f", fontsize=8)
    ax2.set_ylabel("harvest efficiency")
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.legend(handles=handles, loc="upper center", ncol=2, fontsize=8, frameon=False)  # outside the data
    fig.savefig(out_dir / "fl-slo-harvest.png", dpi=120)
    plt.close(fig)


def _deploy_local(args: argparse.Namespace) -> int:
    import contextlib
    import os

    from orchestration.deploy_local import DeployFaults, deploy_local
    from orchestration.flower_processes import scratch_dir

    ctx: contextlib.AbstractContextManager[Path] = (
        contextlib.nullcontext(args.workdir.resolve()) if args.workdir else scratch_dir("dartfl-deploy-")
    )
    print(
        f"dartfl fl deploy-local: {args.clients} devices x {args.rounds} rounds of {args.round_s:g} s",
        file=sys.stderr,
    )
    with ctx as work:
        out = deploy_local(
            work,
            clients=args.clients,
            rounds=args.rounds,
            round_s=args.round_s,
            policy=args.policy,
            rate_per_s=args.rate,
            max_train=args.max_train,
            run_config=_checked_sets(args.set, _DEPLOY_OWNED),
            timeout_s=args.timeout_s,
            faults=DeployFaults(kill_node=args.kill_node, kill_phase=args.kill_phase),
        )
    out["leftover_pids"] = [pid for pid in out["pids"] if _alive(pid, os)]
    if args.json:
        print(json.dumps(out))
        return 0
    from dartfl.cli.tables import print_deploy_report

    print_deploy_report(out)
    return 0


def _alive(pid: int, os: Any) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for our purposes (its parent has not reaped it yet).
    try:
        return " Z" not in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:3]
    except OSError:
        return False


def _register_run(fl_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any run-config key (pyproject.toml)"
    )
    follow = run.add_mutually_exclusive_group()
    follow.add_argument("--detach", action="store_true", help="print the run id and return at once")
    follow.add_argument("--no-stream", action="store_true", help="wait for the end without printing the log")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.add_argument("--timeout-s", type=float, default=86400.0, help="give up waiting after this long")
    run.set_defaults(handler=_run_remote)


def _register_app(fl_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    app = fl_sub.add_parser(
        "app",
        help="write the Flower app (pyproject.toml) into DIR, for `flwr run DIR`",
        description="Write DART-FL's Flower app into DIR: its components and run-config defaults, "
        "no code (every host runs its installed dartfl). Then: cd DIR && flwr run . --stream",
    )
    app.add_argument("directory", type=Path, metavar="DIR", help="where to write pyproject.toml")
    app.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a run-config default (repeatable)"
    )
    app.add_argument("--force", action="store_true", help="replace DIR/pyproject.toml if it exists")
    app.set_defaults(handler=_write_app)


def _write_app(args: argparse.Namespace) -> int:
    from orchestration.flower_app import APP_FILE, write_app

    target = args.directory / APP_FILE
    if target.exists() and not args.force:
        raise ConfigError(f"{target} exists; pass --force to replace it, or give another DIR")
    if args.directory.exists() and not args.directory.is_dir():
        raise ConfigError(f"{args.directory} is a file; give a directory")
    write_app(args.directory, _parse_sets(args.set))
    print(f"wrote {target}; run it with the venv active: cd {args.directory} && flwr run . --stream")
    return 0


def _run_remote(args: argparse.Namespace) -> int:
    import logging

    from orchestration.remote_run import SuperLinkTarget, submit_run

    target = SuperLinkTarget.parse(
        args.superlink, root_certificates=args.root_certificates, insecure=args.insecure
    )
    if args.insecure and not target.is_loopback:
        # The SuperLink itself must run with --insecure for this to work at all, so refusing here
        # protects nothing; say what it means and go on.
        logging.getLogger(__name__).warning(
            "--insecure: the app and its run config go to %s unencrypted and unauthenticated", target.address
        )
    overrides = _parse_sets(args.set)
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

    _reject_unknown_keys(overrides)
    for key in ("results-file", "checkpoint-dir", "store"):
        path = str(overrides.get(key, ""))
        if path and not Path(path).is_absolute():
            # The ServerApp writes them on the SuperLink's host, from a working directory of its own.
            raise ConfigError(f"{key}={path!r}: give an absolute path on the SuperLink's host")
    return FlConfig.from_run_config(overrides)


def _reject_unknown_keys(overrides: dict[str, int | float | str]) -> None:
    from fltask.config import FlConfig

    known = set(FlConfig().to_run_config())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown run-config key(s) {unknown}; valid: {', '.join(sorted(known))}")
