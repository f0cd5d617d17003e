"""`dartfl dc`: the datacenter mode, rollout vs training GPUs in asynchronous RL.

The contract outsiders script against (keep it stable): `dartfl dc sim ... --json` and
`dartfl dc run ... --json` print one object `{"results": [...]}` with one entry per policy,
each with at least `policy`, `samples_per_s`, `tokens_per_s`, `steps`, `rollout_idle_ratio`,
`trainer_idle_ratio`, `staleness_max`, `staleness_mean`, `dropped_samples`, `switches`,
`aborted_gpu_s` (work thrown away: KV recomputed after a reclaim, samples dropped as stale)
and `idle_gpu_s` (CONTRACT_KEYS). `--sweep-static` adds the best static split of a sweep,
named `static:<fraction>`. The plot is dartfl/cli/dc_plot.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dartfl.cli.dc_plot import plot_dc
from dartfl.cli.output_paths import plot_path as checked_plot_path
from dartfl.cli.sim_cmd import add_store_arguments
from dartfl.cli.workload_args import seed_arg
from dartfl.errors import ConfigError, DartflError
from dartfl.registry import Registry, distinct

if TYPE_CHECKING:
    from dartfl.datacenter import DcConfig, DcPolicy

__all__ = ["CONTRACT_KEYS", "MODEL_SIZE_NAMES", "plot_dc", "register"]

DEFAULT_POLICIES = ("sync", "one-step", "static:0.5", "verl-dynamic", "dart")
# The presets of dartfl.datacenter.WORKLOADS, listed to keep numpy out of `--help` (a test checks).
WORKLOAD_NAMES = ("rlvr", "long-prompt", "agentic", "agentic-swe")
# Single-turn workload flags: None means "the preset's value, or the historical default".
SINGLE_TURN_DEFAULTS = {"median_tokens": 1024.0, "length_drift": 1.0, "max_tokens": 8192}
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
    "aborted_gpu_s",
    "idle_gpu_s",
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
        "--workload",
        choices=WORKLOAD_NAMES,
        help="a preset: rlvr (single-turn, lengths growing 3x), long-prompt (4,096-token prompts, "
        "lengths growing 16x), agentic (tool-using episodes), agentic-swe (long-horizon coding "
        "agent); flags below override its values (docs/datacenter.md)",
    )
    g.add_argument(
        "--kv",
        choices=("keep", "evict"),
        help="agentic: KV cache of an episode waiting for a tool is kept or evicted (default keep)",
    )
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
        help="factor the median length grows by from the first to the last step (default 1: none)",
    )
    g.add_argument("--median-tokens", type=float, help="median response length at step 0 (default 1024)")
    g.add_argument("--max-tokens", type=int, help="response length cap, truncation (default 8192)")
    g.add_argument("--group-size", type=int, default=8, help="samples per prompt (GRPO n, default 8)")
    g.add_argument(
        "--batch-prompts", type=int, default=0, help="prompts per training step (default, or 0: 4 per GPU)"
    )
    g.add_argument("--prompt-tokens", type=int, help="prompt length in tokens (default 512, or the preset's)")
    g.add_argument(
        "--sync-mode",
        choices=("blocking", "interrupt", "overlapped"),
        default="interrupt",
        help="how new weights reach the engines (default interrupt)",
    )
    g.add_argument(
        "--switch-cost-s",
        type=float,
        help="dead time of a GPU changing role, 0 to 3600 s (default: by model size); not used by "
        "sync, whose offload/onload between phases is a fixed 3 s",
    )
    g.add_argument(
        "--period-s", type=float, default=10.0, help="allocator control period, >= 0.1 s (default 10 s)"
    )
    s.add_argument("--seed", type=seed_arg, default=1, help="random seed (default 1)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    _add_plot_arguments(s, "dartfl-dc.png", "GPU roles, buffer and staleness")
    add_store_arguments(s)
    s.set_defaults(handler=run_sim)

    r = dc.add_parser(
        "run",
        help="run the real engine (Ray actors) on a toy RL task",
        description="Run asynchronous RL for real: Ray worker actors whose role the allocator switches. "
        "Ray probes outside addresses at start-up: run it inside a loopback-only network namespace, "
        "as root: unshare -n sh -c 'ip link set lo up && exec dartfl dc run ...' "
        "(in a checkout: scripts/loopback-run dartfl dc run ...).",
    )
    r.add_argument("--engine", choices=("ray",), default="ray", help="execution engine (ray)")
    r.add_argument("--workers", type=int, default=3, help="worker actors (default 3)")
    r.add_argument(
        "--task",
        choices=("sort", "tools"),
        default="sort",
        help="toy task: sort (single-turn) or tools (multi-turn, episodes wait for a checker tool)",
    )
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
    parser.add_argument(
        "--plot",
        type=Path,
        help=f"PNG of {shows} over time (default: {default}; with --json, none unless given)",
    )
    parser.add_argument("--no-plot", action="store_true", help="do not write a PNG")
    parser.set_defaults(default_plot=Path(default))


def _need_action(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    parser.print_help(sys.stderr)
    return 2


def _workload(args: argparse.Namespace) -> tuple[Any, int]:
    """The workload and prompt length: the preset (if any), then the flags over it."""
    from dataclasses import replace

    from dartfl.datacenter import WORKLOADS, AgenticWorkload, LogNormalLengths

    preset = WORKLOADS[args.workload] if args.workload else None
    prompt = (
        args.prompt_tokens if args.prompt_tokens is not None else (preset.prompt_tokens if preset else 512)
    )
    base = preset.build() if preset else None
    if isinstance(base, AgenticWorkload):
        single = [f"--{k.replace('_', '-')}" for k in SINGLE_TURN_DEFAULTS if getattr(args, k) is not None]
        if single or args.lengths != "lognormal" or args.trace is not None:
            used = ", ".join(single or ["--lengths/--trace"])
            raise ConfigError(f"{used} applies to single-turn workloads, not --workload {args.workload}")
        return (replace(base, kv=args.kv) if args.kv else base), prompt
    if args.kv is not None:
        raise ConfigError("--kv applies to agentic workloads (--workload agentic or agentic-swe)")
    values = {
        k: getattr(args, k)
        if getattr(args, k) is not None
        else (getattr(base, _FIELD[k]) if isinstance(base, LogNormalLengths) else d)
        for k, d in SINGLE_TURN_DEFAULTS.items()
    }
    return _lengths(args, values), prompt


_FIELD = {"median_tokens": "median_tokens", "length_drift": "drift", "max_tokens": "max_tokens"}


def _lengths(args: argparse.Namespace, values: dict[str, Any]) -> Any:
    from dartfl.datacenter import LogNormalLengths, TraceLengths

    if args.lengths == "lognormal":
        if args.trace is not None:
            raise ConfigError("--trace needs --lengths trace")
        return LogNormalLengths(
            values["median_tokens"], max_tokens=values["max_tokens"], drift=values["length_drift"]
        )
    # The trace's own lengths replace the log-normal's median; --max-tokens and --length-drift
    # still cap and grow them.
    if args.median_tokens is not None:
        raise ConfigError(
            "--median-tokens applies to --lengths lognormal, not --lengths trace (the trace gives the "
            "lengths); drop --median-tokens"
        )
    from workloads.traces import read_azure_llm_requests

    if args.trace is None:
        from importlib import resources

        from workloads.traces.load import bundled_azure_conv_file

        with resources.as_file(bundled_azure_conv_file()) as path:
            requests = read_azure_llm_requests(path)
    else:
        requests = read_azure_llm_requests(args.trace)
    tokens = tuple(int(t) for t in requests.generated_tokens if t > 0)
    return TraceLengths(tokens, max_tokens=values["max_tokens"], drift=values["length_drift"])


def _config(args: argparse.Namespace, prompt_tokens: int) -> Any:
    from dartfl.datacenter import DcConfig, model_spec
    from dartfl.datacenter.model import MAX_SWITCH_S

    if args.switch_cost_s is not None and not 0 <= args.switch_cost_s <= MAX_SWITCH_S:
        raise ConfigError(
            f"--switch-cost-s must be a number of seconds from 0 to {MAX_SWITCH_S:g} (published role "
            f"switches take seconds), got {args.switch_cost_s}"
        )
    model = model_spec(args.model_size, switch_s=args.switch_cost_s)
    return DcConfig(
        gpus=args.gpus,
        model=model,
        steps=args.steps,
        eta=args.eta,
        batch_groups=args.batch_prompts,
        group_size=args.group_size,
        prompt_tokens=prompt_tokens,
        sync_mode=args.sync_mode,
        period_s=args.period_s,
    )


def run_sim(args: argparse.Namespace) -> int:
    import numpy as np

    from dartfl.datacenter import make_dc_policy, simulate
    from dartfl.datacenter.engine import check_fits
    from dartfl.datacenter.policies import DC_POLICIES
    from dartfl.datacenter.sweep import sweep_static
    from dartfl.store import to_jsonable

    lengths, prompt_tokens = _workload(args)
    config = _config(args, prompt_tokens)
    check_fits(config, lengths)
    specs = _distinct_specs(args.policies or DEFAULT_POLICIES, DC_POLICIES)
    policies = [make_dc_policy(spec) for spec in specs]  # fail fast on a bad name
    static_gpus = _static_rollout_gpus(config, policies)
    plot_path = _checked_outputs(args)
    started_s = time.time()  # the run store's start of the run, which is recorded once it is over
    runs, failures, errors = [], [], []
    for policy in policies:  # one policy's failure leaves the others' results standing
        try:
            runs.append(simulate(config, policy, lengths, np.random.default_rng(args.seed)))
        except DartflError as e:
            failures.append({"policy": policy.name, "error": str(e)})
            errors.append(e)
    if not runs:  # nothing to show: the first error is the command's (a run too long: exit 2)
        for error in errors[1:]:
            print(f"dartfl: failed: {error}", file=sys.stderr)
        raise errors[0]
    for error in errors:
        print(f"dartfl: failed: {error}", file=sys.stderr)
    sweep: list[tuple[float, float]] = []
    if args.sweep_static:
        best, sweep = sweep_static(config, lengths, args.seed)
        if _rollout_gpus(config, float(best.policy.partition(":")[2])) not in static_gpus:
            runs.append(best)  # unless a --policy static:F already ran that very split
    summaries = [to_jsonable(r.summary()) for r in runs]
    if plot_path:  # written before the run is recorded: a run in the store had all its outputs
        what = f", {args.workload}" if args.workload else ""
        title = f"{args.gpus} GPUs, {config.model.name}{what}, {args.steps} steps, eta {args.eta}"
        _write_plot(runs, plot_path, title=title)
    run_id = (
        None
        if args.no_store
        else _record(args, runs, summaries, sweep, started_s=started_s, failures=failures)
    )
    extra: dict[str, Any] = {"failed": failures} if failures else {}
    if sweep:
        extra["static_sweep"] = [{"fraction": f, "samples_per_s": v} for f, v in sweep]
    return max(_report(args, summaries, run_id, plot_path, extra), 1 if failures else 0)


def run_real(args: argparse.Namespace) -> int:
    from dartfl.datacenter.policies import RAY_POLICIES
    from dartfl.store import to_jsonable

    # A spec the Ray engine cannot run is refused before Ray and PyTorch load (seconds).
    specs = _distinct_specs(args.policies or ["sync", "dart"], RAY_POLICIES)
    import ray_engine

    cfg = ray_engine.RayRunConfig(
        workers=args.workers, eta=args.eta, steps=args.steps, seed=args.seed, task=args.task
    )
    plot_path = _checked_outputs(args)
    started_s = time.time()
    runs = ray_engine.run_ray(cfg, specs)
    summaries = [to_jsonable(r.summary()) for r in runs]
    if plot_path:  # before the record, as in run_sim
        title = f"Ray engine, {cfg.task} task, {cfg.workers} workers, eta {cfg.eta}, seed {cfg.seed}"
        _write_plot(runs, plot_path, title=title, time_unit="s", resource="workers", rewards=True)
    run_id = None if args.no_store else _record(args, runs, summaries, [], started_s=started_s)
    return _report(args, summaries, run_id, plot_path)


def _rollout_gpus(config: DcConfig, fraction: float) -> int:
    from dartfl.datacenter.policies.base import split_gpus

    return split_gpus(fraction, config.gpus, config.model.tp, config.model.train_min_gpus)


def _static_rollout_gpus(config: DcConfig, policies: Iterable[DcPolicy]) -> set[int]:
    """The rollout GPUs of each `static:F` given, refusing two that run the same split and
    saying when F cannot be met (one engine at least, the trainer's minimum left): the run's
    name keeps the F asked for, so the table would otherwise show a split it did not run."""
    from dartfl.datacenter.policies.static import StaticSplit

    tp, gpus = config.model.tp, config.gpus
    seen: dict[int, str] = {}
    for policy in policies:
        if not isinstance(policy, StaticSplit):
            continue
        rollout = _rollout_gpus(config, policy.fraction)
        if rollout in seen:
            raise ConfigError(
                f"{seen[rollout]} and {policy.name} both run {rollout} of {gpus} GPUs on rollout "
                f"(splits move in engines of {tp}): the same run twice; give one of them"
            )
        seen[rollout] = policy.name
        if abs(rollout / gpus - policy.fraction) > tp / (2 * gpus) + 1e-9:  # more than rounding
            why = (
                f"the trainer keeps at least {config.model.train_min_gpus} GPUs"
                if rollout / gpus < policy.fraction
                else f"rollout keeps at least one engine of {tp} GPU{'s' if tp > 1 else ''}"
            )
            print(
                f"dartfl: warning: {policy.name} runs {rollout} of {gpus} GPUs on rollout "
                f"({rollout / gpus:.3g}): {why}",
                file=sys.stderr,
            )
    return set(seen)


def _distinct_specs(specs: Iterable[str], registry: Registry[Any]) -> list[str]:
    """`distinct`, and also refusing two spellings of one policy (`static:0.5`, `static:0.50`):
    the same knob values would simulate the same run twice, under two names."""
    out = distinct(specs)
    seen: dict[tuple[str, tuple[tuple[str, Any], ...]], str] = {}
    for spec in out:
        entry, values = registry.parse(spec)
        key = (entry.name, tuple(sorted(values.items())))
        if key in seen:
            raise ConfigError(
                f"policy {spec.strip()!r} sets the same knobs as {seen[key]!r}, so it is given twice; "
                "give each --policy once"
            )
        seen[key] = spec.strip()
    return out


def _checked_outputs(args: argparse.Namespace) -> Path | None:
    """The plot path and the run store, checked before any work (dartfl/cli/output_paths.py):
    the commands simulate or run first and write last, so a bad output found then would
    throw the run away. Returns the plot path (None: no plot)."""
    path = checked_plot_path(args, args.default_plot)
    if not args.no_store:
        from dartfl.cli.recording import check_store

        check_store(args.store)
    return path


def _write_plot(runs: list[Any], path: Path, **kwargs: Any) -> None:
    """`plot_dc`, with a failed write (disk full, folder gone since the check) as one line."""
    try:
        plot_dc(runs, path, **kwargs)
    except OSError as exc:
        raise ConfigError(
            f"--plot {path}: cannot write the plot ({exc.strerror or exc}); pick a writable directory, "
            "or --no-plot"
        ) from None


def _report(
    args: argparse.Namespace,
    summaries: list[dict[str, Any]],
    run_id: int | None,
    plot_path: Path | None,
    extra: dict[str, Any] | None = None,
) -> int:
    """The `--json` contract (results, run_id and `extra`), or the table and the plot's path."""
    if args.json:
        json.dump({"results": summaries, "run_id": run_id, **(extra or {})}, sys.stdout, default=float)
        sys.stdout.write("\n")
    else:
        _print_table(summaries)
        if plot_path:
            print(f"plot: {plot_path}")
    return 0


def _record(
    args: argparse.Namespace,
    runs: list[Any],
    summaries: list[dict[str, Any]],
    sweep: list[tuple[float, float]],
    *,
    started_s: float,
    failures: list[dict[str, str]] | None = None,
) -> int:
    """One run in the store: each policy's summary and its per-period decisions (roles,
    buffer, samples trained), which the dashboard's Datacenter page charts. `started_s` is
    the Unix time the run began, so the stored duration is the run's, not the recording's."""
    from dartfl.cli.recording import run_config
    from dartfl.paths import default_store_path
    from dartfl.store import RunStore

    config = run_config(args)
    config["static_sweep"] = sweep
    if failures:  # the run is `failed`: some results are missing, and this says why
        config["failed"] = failures
    size = f"{args.gpus} GPUs" if hasattr(args, "gpus") else f"{args.workers} workers"
    label = f"dc {args.dc_command}: {size}"
    if getattr(args, "workload", None):
        label += f", {args.workload}"
    with RunStore(args.store or default_store_path()) as store:
        run_id = store.start_run("dc", label, config, started_s=started_s)
        try:
            for run, s in zip(runs, summaries, strict=True):
                store.add_decisions(run_id, str(s["policy"]), decision_rows(run))
                store.add_result(run_id, str(s["policy"]), s)
        except BaseException:
            store.finish_run(run_id, "failed")
            raise
        store.finish_run(run_id, "failed" if failures else "ok")
    return run_id


def decision_rows(run: Any) -> list[Any]:
    """A run's series as the store's decision rows: buffer depth as the backlog, the rollout
    share of the GPUs (or workers) as the share, the samples trained in the period that
    starts at the row (the series books them at the row that ends the period)."""
    from dartfl.store import DecisionRow

    s = run.series
    t = s["t_s"]
    total = [
        r + tr + sw for r, tr, sw in zip(s["rollout_gpus"], s["train_gpus"], s["switching_gpus"], strict=True)
    ]
    trained = s.get("trained_samples", [0.0] * len(t))
    after = [*trained[1:], float(run.trained_samples) - sum(trained)]
    return [
        DecisionRow(
            t_s=float(t[j]),
            backlog=max(0, round(s["buffer_groups"][j])),
            inference_share=s["rollout_gpus"][j] / total[j] if total[j] else 0.0,
            microbatch=0,
            max_batch=0,
            task_shares=(),
            trained_samples=max(0, round(after[j])),
        )
        for j in range(len(t))
    ]


def _print_table(summaries: list[dict[str, Any]]) -> None:
    """The contract's figures per policy, headed in words, in the tables' one number format."""
    from dartfl.cli.tables import number, print_table

    heads = {
        "samples_per_s": "samples/s",
        "tokens_per_s": "tokens/s",
        "rollout_idle_ratio": "rollout idle",
        "trainer_idle_ratio": "trainer idle",
        "staleness_max": "stale max",
        "staleness_mean": "stale mean",
        "dropped_samples": "dropped",
        "switches": "switches",
        "aborted_gpu_s": "aborted GPU·s",
        "idle_gpu_s": "idle GPU·s",
    }
    rows = []
    for s in summaries:
        cells = [str(s.get("policy"))]
        for key in heads:
            v = s.get(key)
            cells.append(f"{v:.1%}" if key.endswith("_ratio") and isinstance(v, float) else number(v))
        rows.append(cells)
    print_table(["policy", *heads.values()], rows)
