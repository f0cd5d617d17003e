"""benchmarks/frontier.py --stress: a stress row's fixed steps and DART drawn, zoomed on the
last point of attainment, and an unknown row refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import frontier


def test_an_unknown_stress_row_is_refused_with_the_naming_rule() -> None:
    with pytest.raises(SystemExit, match=r"no stress case 'nope'.*load0\.1"):
        frontier.stress_sweep("nope")


def test_a_stress_row_is_drawn_zoomed_and_past_the_fluid_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = frontier.STRESS_FAMILIES["inference-first (m)"]
    points = {spec: (0.29 + i * 1e-4, 1.0 + i * 0.05) for i, spec in enumerate(steps)}
    points["dart"] = (0.2943, 1.53)
    points["inference-only"] = (0.2964, 0.0)
    row = {"scenario": "serverless/x86-1core/50ms/load0.5", "workload": "serverless", "points": points}
    limits: list[tuple[float, float]] = []
    real_savefig = plt.Figure.savefig

    def spy(fig: plt.Figure, *args: object, **kwargs: object) -> None:
        limits.extend((fig.axes[0].get_xlim(), fig.axes[0].get_ylim()))
        real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    path = tmp_path / "f.png"
    frontier.plot(
        row, path, frontier.STRESS_FAMILIES, frontier.STRESS_REFERENCES, below_points=1.0, label_points=True
    )

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (x_lo, x_hi), (y_lo, y_hi) = limits
    assert x_lo == pytest.approx(29.64 - 1.0) and x_hi > 29.64  # one point below inference-only
    assert y_lo == 0.0 and y_hi >= max(h for _, h in points.values())  # harvests above 1 stay in


def test_json_without_a_stress_row_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["frontier.py", "--json", "out.json"])
    with pytest.raises(SystemExit) as exit_info:
        frontier.main()
    assert exit_info.value.code == 2
    assert "--json keeps the points of --stress rows" in capsys.readouterr().err
