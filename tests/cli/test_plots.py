"""The CLI's plots: written only when asked for, and each kept in test-artifacts/plots/ so that
a person can look at every one (docs/gallery.md shows them with their commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dartfl.cli.fl_plot import plot_fl_results
from dartfl.cli.main import main
from dartfl.cli.plots import nice_window_s

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "plots"


def test_sim_without_plot_writes_no_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["sim", "--workload", "poisson", "--duration-s", "5", "--profile", "pi4", "--no-store"]
    assert main([*argv, "--policy", "dart"]) == 0
    assert list(tmp_path.iterdir()) == []  # no dartfl-sim.png nobody asked for


def test_sim_plot_is_one_row_per_policy(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / "sim-small.png"
    argv = ["sim", "--workload", "mmpp", "--duration-s", "60", "--profile", "pi4", "--target-load", "0.6"]
    policies = ["--policy", "dart", "--policy", "inference-first", "--policy", "static:0.5"]
    assert main([*argv, *policies, "--no-store", "--plot", str(png)]) == 0
    assert png.stat().st_size > 20_000


@pytest.mark.parametrize(("horizon_s", "window_s"), [(300, 2.0), (60, 0.5), (3600, 50.0), (1, 0.01)])
def test_the_latency_window_is_a_round_number(horizon_s: float, window_s: float) -> None:
    assert nice_window_s(horizon_s) == pytest.approx(window_s)


def _fl_result(policy: str, slo: float, harvest: float) -> dict[str, Any]:
    tasks = {"digits": 0.0, "fashion": 0.0}
    history = [
        {
            "round": r,
            "accuracy_per_task": {t: 1 - 0.5 / r - 0.1 * i for i, t in enumerate(tasks)},
            "demand_weighted_accuracy": 0.95 - 0.5 / r,
        }
        for r in range(1, 6)
    ]
    return {
        "policy": policy,
        "loss_weighting": "demand",
        "accuracy_per_task": history[-1]["accuracy_per_task"],
        "history": history,
        "slo_attainment": slo,
        "slo_attainment_inference_only": 1.0,
        "harvest_efficiency": harvest,
    }


def test_fl_plots_keep_the_reference_line_and_legend_off_the_bars() -> None:
    # Illustrative figures: a Flower run takes minutes; the layout is what is checked here.
    out = ARTIFACTS
    plot_fl_results([_fl_result("dart", 0.998, 0.81), _fl_result("inference-first", 0.97, 0.66)], out)
    for name in ("fl-accuracy.png", "fl-slo-harvest.png"):
        assert (out / name).stat().st_size > 10_000


def test_workload_plot_is_kept_with_the_others(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    trace = tmp_path / "mmpp.csv"
    assert main(["workload", "generate", "mmpp", "--duration-s", "300", "--seed", "1", "-o", str(trace)]) == 0
    assert main(["workload", "plot", str(trace), "-o", str(ARTIFACTS / "workload.png")]) == 0
    assert (ARTIFACTS / "workload.png").stat().st_size > 10_000


def test_deploy_local_prints_tables_with_accuracy_and_rounded_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dartfl.cli.tables import print_deploy_report

    out = {
        "clients": 2,
        "rounds": 1,
        "round_deadline_s": 20.0,
        "per_round": [
            {"round": 1, "replies": 2, "server_round_s": 21.37, "slowest_client_s": 18.2,
             "slowest_train_s": 15.0, "overhead_s": 3.17, "updated": ["edge-1", "edge-2"]},
        ],
        "mean_overhead_s": 3.17,
        "total_s": 61.2,
        "mean_accuracy": 0.8123,
        "slo_attainment": 0.9987,
        "harvest_efficiency": 0.71,
        "samples_trained": 12345,
        "replay": {"edge-1": {"sent": 1200, "replies": 1200, "ok": 1200, "p50_latency_ms": 7.5780920001307095,
                              "p99_latency_ms": 21.0}},
        "killed": {"device": "edge-2", "phase": "training", "killed_after_s": 4.25},
        "leftover_pids": [],
    }  # fmt: skip
    print_deploy_report(out)
    text = capsys.readouterr().out
    assert "7.6" in text and "7.578" not in text  # no raw floats
    assert "edge-1 edge-2" in text and "killed edge-2's SuperNode while training: 4.2 s in" in text
    assert "mean accuracy 0.812" in text and "SLO met 99.9%" in text and "12,345 samples" in text


def test_a_one_policy_dc_plot_keeps_its_legend_inside_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One column of panels is 3.6 in wide; its five labels in one row ran off both sides.
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    save = Figure.savefig

    def keep(fig: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(fig)
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    png = tmp_path / "dc.png"
    argv = ["dc", "sim", "--gpus", "8", "--steps", "5", "--policy", "dart", "--no-store", "--plot", str(png)]
    assert main(argv) == 0
    (fig,) = saved
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width
