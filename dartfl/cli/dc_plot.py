"""The datacenter mode's plot: GPU (or worker) roles, buffer depth and staleness over time,
one column per policy, for `dc sim` and `dc run` alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["TIME_UNITS_S", "plot_dc"]

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
