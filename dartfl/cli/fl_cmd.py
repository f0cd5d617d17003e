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
`run` (a run on a SuperLink that is already up) and `app` (the app for Flower's own workflow)
are in dartfl.cli.fl_run_cmd; the results' table and plots in dartfl.cli.fl_plot.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from dartfl.cli.fl_plot import plot_fl_results, print_fl_table
from dartfl.cli.fl_run_cmd import NO_STORE, check_timeout_s, register_app, register_run
from dartfl.cli.run_config_args import add_set_argument, checked_sets
from dartfl.cli.sim_cmd import add_store_arguments
from dartfl.cli.workload_args import seed_arg
from dartfl.errors import ConfigError
from dartfl.paths import default_store_path

__all__ = ["register"]

DEFAULT_POLICIES = ("dart", "inference-first")
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
    sim = fl_sub.add_parser(
        "sim",
        help="Flower simulation: virtual-time devices, real training",
        description="Flower simulation: virtual-time devices, real training. Flower's simulation "
        "engine is Ray, which probes outside addresses at start-up: run it inside a loopback-only "
        "network namespace, as root: unshare -n sh -c 'ip link set lo up && exec dartfl fl sim ...' "
        "(in a checkout: scripts/loopback-run dartfl fl sim ...).",
    )
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
    add_set_argument(sim, owned=_SIM_OWNED)
    sim.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {results: [...]}, one per policy, each with its run store run_id",
    )
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
    add_set_argument(dep, owned=_DEPLOY_OWNED)
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
    register_run(fl_sub)
    register_app(fl_sub)

    def _usage(_args: argparse.Namespace) -> int:
        fl.print_help()
        return 2

    fl.set_defaults(handler=_usage)


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


def _sim(args: argparse.Namespace) -> int:
    from fltask.config import FlConfig
    from orchestration.flower_processes import LocalSuperLink, flwr_run, scratch_dir

    if args.clients < 1 or args.rounds < 1:
        raise ConfigError(f"--clients and --rounds must be >= 1, got {args.clients} and {args.rounds}")
    if args.plot_dir is not None and args.plot_dir.exists() and not args.plot_dir.is_dir():
        raise ConfigError(f"--plot-dir {args.plot_dir} is a file; give a directory")
    check_timeout_s(args.timeout_s)
    policies = args.policy or list(DEFAULT_POLICIES)
    base: dict[str, int | float | str] = {**HEADLINE, **checked_sets(args.set, _SIM_OWNED)}
    base.update({"num-server-rounds": args.rounds, "seed": args.seed, "min-available-nodes": args.clients})
    if args.loss_weights:
        base["loss-weighting"] = args.loss_weights
    configs = [FlConfig.from_run_config({**base, "policy": p}) for p in policies]  # fail fast on bad input
    if not args.no_store:
        from dartfl.cli.recording import check_store

        check_store(args.store)  # before the SuperLink starts, not as "wrote no results" after it
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
        plot_fl_results(results, args.plot_dir)
    if args.json:
        print(json.dumps({"results": results}))
    else:
        print_fl_table(results)
        if not args.no_store:
            ids = [str(r["run_id"]) for r in results if r.get("run_id") is not None]
            print(f"recorded as run{'s' * (len(ids) > 1)} {', '.join(ids)} in the run store")
    return 0


def _show_progress(line: str) -> None:
    """The ServerApp's progress (`_ROUND_LINE`), from the run's log, on stderr."""
    if (found := _ROUND_LINE.search(line)) is not None:
        print(f"dartfl fl sim: {found.group(0)}", file=sys.stderr, flush=True)


def _deploy_local(args: argparse.Namespace) -> int:
    import contextlib
    import os

    from edge_client.agent_config import check_agent_policy
    from orchestration.deploy_local import DeployFaults, deploy_local
    from orchestration.flower_processes import scratch_dir

    check_timeout_s(args.timeout_s)
    check_agent_policy(args.policy)  # every agent would exit on it, after the SuperLink started
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
            run_config=checked_sets(args.set, _DEPLOY_OWNED),
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
