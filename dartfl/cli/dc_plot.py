"""The datacenter mode's plot: GPU (or worker) roles, buffer depth and staleness over time,
one column per policy, for `dc sim` and `dc run` alike.

A policy without a time series (the colocated `sync` baseline, whose GPUs all switch role
together) keeps its column: the column says why there is nothing to draw and gives its
figures, so that no policy of the run silently disappears."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["TIME_UNITS_S", "plot_dc"]

TIME_UNITS_S = {"s": 1.0, "h": 3600.0}


def _figure(run: Any, name: str) -> float | None:
    value = run.summary().get(name)
    return float(value) if isinstance(value, int | float) else None


def _column_title(run: Any) -> str:
    rate = _figure(run, "samples_per_s")
    return run.policy if rate is None else f"{run.policy}\n{rate:,.1f} samples/s"


def _colocated_note(run: Any, resource: str) -> str:
    """What a policy without a series did, in words."""
    share = _figure(run, "rollout_share_of_step")
    lines = [
        f"colocated: all {resource} roll out,",
        "then all train, in lockstep",
        "(no split over time to draw)",
    ]
    if share is not None:
        lines.append(f"rollout {share:.0%} of each step")
    return "\n".join(lines)


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

    A run is anything with `policy`, `eta`, `summary()` and a `series` of the simulator's keys
    (a simulated `DcRun` or a Ray engine `RayRun`); `rewards` adds a row with each run's
    `reward_curve` (mean reward per training step).
    """
    from matplotlib.ticker import MaxNLocator

    from dartfl.cli.plots import pyplot

    plt = pyplot()
    rows = 4 if rewards else 3
    cols = max(1, len(runs))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.4 * rows + 0.9), squeeze=False)
    drawn = [j for j, run in enumerate(runs) if run.series["t_s"]]
    for j, run in enumerate(runs):
        axes[0][j].set_title(_column_title(run), fontsize=9)
        if j not in drawn:
            for row in range(rows):
                axes[row][j].set_axis_off()
            axes[0][j].text(0.5, 0.5, _colocated_note(run, resource), ha="center", va="center", fontsize=8)
            continue
        s = run.series
        t = [x / TIME_UNITS_S[time_unit] for x in s["t_s"]]
        axes[0][j].stackplot(
            t,
            s["rollout_gpus"],
            s["train_gpus"],
            s["switching_gpus"],
            labels=("rollout", "train", "switching"),
            step="post",
        )
        axes[0][j].set_ylim(0, max(1, max(a + b + c for a, b, c in _roles(s))))
        axes[1][j].step(t, s["buffer_groups"], where="post", lw=0.8)
        axes[1][j].set_ylim(bottom=0)
        axes[2][j].step(t, s["staleness_max"], where="post", lw=0.8, label="staleness")
        axes[2][j].axhline(run.eta, color="k", ls="--", lw=0.8, label="bound (eta)")
        axes[2][j].set_ylim(-0.2, max(run.eta, max(s["staleness_max"], default=0)) + 0.5)
        axes[2][j].yaxis.set_major_locator(MaxNLocator(integer=True))  # versions are whole
        for row in (1, 2):  # the reward row counts steps, not time
            axes[row][j].sharex(axes[0][j])
        axes[2][j].set_xlabel(f"time ({time_unit})")
        if rewards:
            curve = run.reward_curve
            axes[3][j].plot(range(1, len(curve) + 1), curve, lw=0.8, marker=".", ms=3)
            axes[3][j].set_xlabel("training step")
    first = drawn[0] if drawn else 0
    axes[0][first].set_ylabel(resource)
    axes[1][first].set_ylabel("buffer (prompts)")
    axes[2][first].set_ylabel("staleness of last batch\n(policy versions)")
    if rewards:
        axes[3][first].set_ylabel("mean reward")
    fig.suptitle(title or "dartfl dc sim", fontsize=11)
    # Legends outside the data: one strip under the title, for the roles and the bound.
    handles: list[Any] = []
    labels: list[str] = []
    if drawn:
        for row in (0, 2):
            h, lab = axes[row][first].get_legend_handles_labels()
            handles += h
            labels += lab
    # One column of panels is too narrow for five labels in a row (they ran off both sides).
    per_row = len(labels) if cols > 1 else 3
    strip = 0.93 if -(-len(labels) // max(per_row, 1)) <= 1 else 0.89
    fig.tight_layout(rect=(0, 0, 1, strip if handles else 0.97))
    if handles:
        fig.legend(
            handles,
            labels,
            loc="upper center",
            ncol=per_row,
            fontsize=8,
            frameon=False,
            bbox_to_anchor=(0.5, 0.955),
        )
    try:  # a failed write (the caller reports it) must not leave the figure open
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=90)
    finally:
        plt.close(fig)
    return path


def _roles(series: dict[str, list[float]]) -> zip[tuple[float, float, float]]:
    return zip(series["rollout_gpus"], series["train_gpus"], series["switching_gpus"], strict=True)
