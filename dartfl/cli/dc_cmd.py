"""`dartfl dc`: the datacenter mode, rollout vs training GPUs in asynchronous RL.

The contract outsiders script against (keep it stable): `dartfl dc sim ... --json` and
`dartfl dc run ... --json` print one object `{"results": [...]}` with one entry per policy,
each with at least `policy`, `samples_per_s`, `tokens_per_s`, `steps`, `rollout_idle_ratio`,
`trainer_idle_ratio`, `staleness_max`, `staleness_mean`, `dropped_samples`, `switches`
(CONTRACT_KEYS). `--sweep-static` adds the
best static split of a sweep, named `static:<fraction>`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dartfl.cli.output_paths import plot_path as checked_plot_path
from dartfl.cli.sim_cmd import add_store_arguments
from dartfl.cli.workload_args import seed_arg
from dartfl.errors import ConfigError

DEFAULT_POLICIES = ("sync", "one-step", "static:0.5", "dart")
# The sizes dartfl.datacenter.model_spec accepts, aliases included: listed, not imported, to keep
# numpy out of `--help`; a test checks it matches the model table.
MODEL_SIZE_NAMES = ("1.5b", "7b", "14b", "30b", "30b-a3b", "32b", "70b", "235b", "235b-a22b")
# The keys every result of `dc sim --json` and `dc run --json` carries (the contract above).
CONTRACT_KEYS = (
    "policy",
    "samples_per_s",
    "tokens_per_s",
    "steps",
    "rollout_idle_ratio",
    "trainer_idle_ratio",
    "staleness_max",
    "staleness_mean",
    "dropped_samples",
    "switches",
)


def register(sub: Any) -> None:
    p = sub.add_parser("dc", help="datacenter mode: balance rollout and training GPUs in async RL")
    dc = p.add_subparsers(dest="dc_command", metavar="ACTION")
    s = dc.add_parser(
        "sim",
        help="simulate split policies on a GPU cluster",
        description="Simulate asynchronous RL post-training on a GPU cluster under each split policy.",
    )
    s.add_argument("--gpus", type=int, required=True, help="GPUs in the cluster")
    s.add_argument(
        "--model-size", default="7b", help=f"model size, one of: {', '.join(MODEL_SIZE_NAMES)} (default 7b)"
    )
    _add_run_arguments(s, 200, "training steps", " ".join(DEFAULT_POLICIES))
    s.add_argument("--sweep-static", action="store_true", help="add the best static split found by a sweep")
    g = s.add_argument_group("workload")
    g.add_argument(
        "--lengths",
        choices=("lognormal", "trace"),
        default="lognormal",
        help="response lengths: log-normal (p99/median 10) or resampled from a trace",
    )
    g.add_argument(
        "--trace",
        type=Path,
        help="Azure LLM trace CSV for --lengths trace (default: the bundled conversation trace)",
    )
    g.add_argument(
        "--length-drift",
        type=float,
        default=1.0,
        help="factor the median length grows by from the first to the last step (1: none)",
    )
    g.add_argument("--median-tokens", type=float, default=1024.0, help="median response length at step 0")
    g.add_argument("--max-tokens", type=int, default=8192, help="response length cap (truncation)")
    g.add_argument("--group-size", type=int, default=8, help="samples per prompt (GRPO n, default 8)")
    g.add_argument(
        "--batch-prompts", type=int, default=0, help="prompts per training step (default 4 per GPU)"
    )
    g.add_argument("--prompt-tokens", type=int, default=512, help="prompt length in tokens (default 512)")
    g.add_argument(
        "--sync-mode",
        choices=("blocking", "interrupt", "overlapped"),
        default="interrupt",
        help="how new weights reach the engines (default interrupt)",
    )
    g.add_argument(
        "--switch-cost-s", type=float, help="dead time of a GPU changing role (default: by model size)"
    )
    g.add_argument("--period-s", type=float, default=10.0, help="allocator control period (default 10 s)")
    s.add_argument("--seed", type=seed_arg, default=1, help="random seed (default 1)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    _add_plot_arguments(s, "dartfl-dc.png", "GPU roles, buffer and staleness")
    add_store_arguments(s)
    s.set_defaults(handler=run_sim)

    r = dc.add_parser(
        "run",
        help="run the real engine (Ray actors) on a toy RL task",
        description="Run asynchronous RL for real: Ray worker actors whose role the allocator switches. "
        "Run it inside a loopback-only network namespace (scripts/loopback-run).",
    )
    r.add_argument("--engine", choices=("ray",), default="ray", help="execution engine (ray)")
    r.add_argument("--workers", type=int, default=3, help="worker actors (default 3)")
    _add_run_arguments(r, 30, "training steps per policy", "sync dart")
    r.add_argument("--seed", type=seed_arg, default=1, help="random seed (default 1)")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    _add_plot_arguments(r, "dartfl-dc-run.png", "worker roles, buffer, staleness and reward")
    add_store_arguments(r)
    r.set_defaults(handler=run_real)
    p.set_defaults(handler=lambda args: _need_action(p, args))


def _add_run_arguments(parser: argparse.ArgumentParser, steps: int, steps_help: str, policies: str) -> None:
    """--eta, --steps and the repeatable --policy, shared by `dc sim` and `dc run`."""
    parser.add_argument("--eta", type=int, default=2, help="staleness bound in policy versions (default 2)")
    parser.add_argument("--steps", type=int, default=steps, help=f"{steps_help} (default {steps})")
    parser.add_argument(
        "--policy",
        action="append",
        dest="policies",
        metavar="SPEC",
        help=f"policy (repeatable; default: {policies}); see docs/datacenter.md",
    )


def _add_plot_arguments(parser: argparse.ArgumentParser, default: str, shows: str) -> None:
    parser.add_argument("--plot", type=Path, help=f"PNG of {shows} over time (default: {default})")
    parser.add_argument("--no-plot", action="store_true", help="do not write a PNG")
    parser.set_defaults(default_plot=Path(default))


def _need_action(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    parser.print_help(sys.stderr)
    return 2


def _lengths(args: argparse.Namespace) -> Any:
    from dartfl.datacenter import LogNormalLengths, TraceLengths

    if args.lengths == "lognormal":
        if args.trace is not None:
            raise ConfigError("--trace needs --lengths trace")
        return LogNormalLengths(args.median_tokens, max_tokens=args.max_tokens, drift=args.length_drift)
    from workloads.traces import read_azure_llm_requests

    if args.trace is None:
        from importlib import resources

        from workloads.traces.load import BUNDLED_AZURE_CONV

        with resources.as_file(resources.files("workloads.data").joinpath(BUNDLED_AZURE_CONV)) as path:
            requests = read_azure_llm_requests(path)
    else:
        requests = read_azure_llm_requests(args.trace)
    tokens = tuple(int(t) for t in requests.generated_tokens if t > 0)
    return TraceLengths(tokens, max_tokens=args.max_tokens, drift=args.length_drift)


def _config(args: argparse.Namespace) -> Any:
    from dartfl.datacenter import DcConfig, model_spec

    if args.switch_cost_s is not None and not args.switch_cost_s >= 0:
        raise ConfigError(f"--switch-cost-s must be >= 0, got {args.switch_cost_s}")
    model = model_spec(args.model_size, switch_s=args.switch_cost_s)
    return DcConfig(
        gpus=args.gpus,
        model=model,
        steps=args.steps,
        eta=args.eta,
        batch_groups=args.batch_prompts,
        group_size=args.group_size,
        prompt_tokens=args.prompt_tokens,
        sync_mode=args.sync_mode,
        period_s=args.period_s,
    )


def run_sim(args: argparse.Namespace) -> int:
    import numpy as np

    from dartfl.datacenter import make_dc_policy, simulate
    from dartfl.datacenter.sweep import sweep_static
    from dartfl.store import to_jsonable

    config = _config(args)
    plot_path = checked_plot_path(args, args.default_plot)
    lengths = _lengths(args)
    specs = args.policies or list(DEFAULT_POLICIES)
    policies = [make_dc_policy(spec) for spec in specs]  # fail fast on a bad name
    runs = [simulate(config, p, lengths, np.random.default_rng(args.seed)) for p in policies]
    sweep: list[tuple[float, float]] = []
    if args.sweep_static:
        best, sweep = sweep_static(config, lengths, args.seed)
        if best.policy not in {r.policy for r in runs}:
            runs.append(best)
    summaries = [to_jsonable(r.summary()) for r in runs]
    run_id = None
    if not args.no_store:
        run_id = _record(args, summaries, sweep)
    if plot_path:
        plot_dc(runs, plot_path, title=f"{args.gpus} GPUs, {config.model.name}, eta {args.eta}")
    if args.json:
        out: dict[str, Any] = {"results": summaries, "run_id": run_id}
        if sweep:
            out["static_sweep"] = [{"fraction": f, "samples_per_s": v} for f, v in sweep]
        json.dump(out, sys.stdout, default=float)
        sys.stdout.write("\n")
    else:
        _print_table(summaries)
        if plot_path:
            print(f"plot: {plot_path}")
    return 0


def run_real(args: argparse.Namespace) -> int:
    from dartfl.datacenter.ray_engine import RayRunConfig, run_ray
    from dartfl.store import to_jsonable

    specs = args.policies or ["sync", "dart"]
    cfg = RayRunConfig(workers=args.workers, eta=args.eta, steps=args.steps, seed=args.seed)
    plot_path = checked_plot_path(args, args.default_plot)
    runs = run_ray(cfg, specs)
    summaries = [to_jsonable(r.summary()) for r in runs]
    run_id = None if args.no_store else _record(args, summaries, [])
    if plot_path:
        title = f"Ray engine, {cfg.workers} workers, eta {cfg.eta}, seed {cfg.seed}"
        plot_dc(runs, plot_path, title=title, time_unit="s", resource="workers", rewards=True)
    if args.json:
        json.dump({"results": summaries, "run_id": run_id}, sys.stdout, default=float)
        sys.stdout.write("\n")
    else:
        _print_table(summaries)
        if plot_path:
            print(f"plot: {plot_path}")
    return 0


def _record(
    args: argparse.Namespace, summaries: list[dict[str, Any]], sweep: list[tuple[float, float]]
) -> int:
    from dartfl.paths import default_store_path
    from dartfl.store import RunStore

    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "handler"}
    config["static_sweep"] = sweep
    label = f"dc {args.dc_command}: {getattr(args, 'gpus', getattr(args, 'workers', '?'))} workers/GPUs"
    with RunStore(args.store or default_store_path()) as store:
        run_id = store.start_run("dc", label, config)
        try:
            for s in summaries:
                store.add_result(run_id, str(s["policy"]), s)
        except BaseException:
            store.finish_run(run_id, "failed")
            raise
        store.finish_run(run_id, "ok")
    return run_id


TIME_UNITS_S = {"s": 1.0, "h": 3600.0}


def plot_dc(
    runs: list[Any],
    path: Path,
    title: str = "",
    *,
    time_unit: str = "h",
    resource: str = "GPUs",
    rewards: bool = False,
) -> Path:
    """Roles, buffer depth and staleness over time, one column per policy.

    A run is anything with `policy`, `eta` and a `series` of the simulator's keys (a
    simulated `DcRun` or a Ray engine `RayRun`); `rewards` adds a row with each run's
    `reward_curve` (mean reward per training step).
    """
    from dartfl.cli.plots import pyplot

    plt = pyplot()
    shown = [r for r in runs if r.series["t_s"]] or runs[:1]
    rows = 4 if rewards else 3
    fig, axes = plt.subplots(rows, len(shown), figsize=(4.2 * len(shown), 2.7 * rows), squeeze=False)
    for j, run in enumerate(shown):
        s = run.series
        t = [x / TIME_UNITS_S[time_unit] for x in s["t_s"]]
        ax = axes[0][j]
        ax.stackplot(
            t,
            s["rollout_gpus"],
            s["train_gpus"],
            s["switching_gpus"],
            labels=("rollout", "train", "switching"),
            step="post",
        )
        ax.set_title(run.policy, fontsize=9)
        axes[1][j].step(t, s["buffer_groups"], where="post", lw=0.8)
        axes[2][j].step(t, s["staleness_max"], where="post", lw=0.8)
        axes[2][j].axhline(run.eta, color="k", ls="--", lw=0.8, label="eta")
        for row in (1, 2):  # the reward row counts steps, not time
            axes[row][j].sharex(axes[0][j])
        axes[2][j].set_xlabel(f"time ({time_unit})")
        if rewards:
            curve = run.reward_curve
            axes[3][j].plot(range(1, len(curve) + 1), curve, lw=0.8, marker=".", ms=3)
            axes[3][j].set_xlabel("training step")
    axes[0][0].set_ylabel(resource)
    axes[0][0].legend(loc="lower left", fontsize=7)
    axes[1][0].set_ylabel("buffer (prompts)")
    axes[2][0].set_ylabel("staleness of last batch")
    if rewards:
        axes[3][0].set_ylabel("mean reward")
    fig.suptitle(title or "dartfl dc sim")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _print_table(summaries: list[dict[str, Any]]) -> None:
    cols = [c for c in CONTRACT_KEYS if c != "steps"]
    print("  ".join(f"{c:>18s}" for c in cols))
    for s in summaries:
        cells = []
        for c in cols:
            v = s.get(c)
            cells.append(f"{v:>18.3f}" if isinstance(v, float) else f"{v!s:>18s}")
        print("  ".join(cells))
