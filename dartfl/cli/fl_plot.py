"""What `dartfl fl sim` shows of its results: a table of one row per policy and, with
--plot-dir, the per-task accuracy per round and the SLO / harvest bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_fl_results", "print_fl_table"]


def print_fl_table(results: list[dict[str, Any]]) -> None:
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


def plot_fl_results(results: list[dict[str, Any]], out_dir: Path) -> None:
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
