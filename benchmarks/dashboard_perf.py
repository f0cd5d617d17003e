"""Dashboard performance: 100 devices x 1 hour of telemetry (1 Hz), plus sim, FL and
datacenter runs; times each page's data queries and each page's full render (AppTest).

    .venv/bin/python benchmarks/dashboard_perf.py [--devices 100] [--seconds 3600] [--out FILE]

Prints one JSON object; the target is < 2 s per page (issue 6). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_output import print_json

from dartfl.store import DecisionRow, RunStore
from dashboard import data, synthetic
from dashboard.telemetry import Liveness

ROOT = Path(__file__).resolve().parents[1]


def timed(fn: Callable[[], Any], repeat: int = 5) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "max_s": max(times)}


def fill(path: Path, devices: int, seconds: int) -> dict[str, Any]:
    end = time.time()
    with RunStore(path) as store:
        start = time.perf_counter()
        rows = synthetic.fill_telemetry(store, devices, seconds, end_s=end)
        fill_s = time.perf_counter() - start
        sim = store.start_run("sim", "1 h, 4 policies", {})
        for policy in ("dart", "inference-only", "inference-first:4", "static:0.5"):
            decisions = [DecisionRow(t * 0.25, t % 50, 0.5, 8, 32, (0.4, 0.3, 0.3), 3) for t in range(14_400)]
            store.add_decisions(sim, policy, decisions)
            store.add_result(sim, policy, {"slo_attainment": 0.99, "p99_latency_s": 0.2, "train_samples": 1})
        store.finish_run(sim)
        synthetic.record_fl_run(store, rounds=50, clients=20)
        synthetic.record_dc_run(store, seconds=3600)
    return {"telemetry_rows": rows, "fill_s": fill_s, "end_s": end, "file_mb": path.stat().st_size / 1e6}


def query_times(path: Path) -> dict[str, dict[str, float]]:
    store = RunStore(path)
    now = time.time()
    device = store.telemetry_devices()[0].device

    def fleet() -> None:
        tiles = data.fleet_tiles(
            store.telemetry_latest(), None, now, Liveness(), baselines=store.telemetry_before
        )
        data.fleet_frame(tiles)
        store.telemetry_fleet_series(now - 3600, now, max_points=240)

    def device_page() -> None:
        store.telemetry_devices()
        data.device_frames(store.telemetry_series(device, now - 3600, now, max_points=400))

    def experiments() -> None:
        runs = data.run_choices(store, ("sim", "replay", "fleet", "fl", "dc"))
        sims = [r for r in runs if r.kind == "sim"]
        data.comparison_frame(store, sims)
        data.decisions_frame(store, sims[0].run_id, list(sims[0].policies), max_points=800)

    def rounds() -> None:
        (run,) = data.run_choices(store, ("fl",))
        data.fl_frames(run, store.results(run.run_id))

    def datacenter() -> None:
        (run,) = data.run_choices(store, ("dc",))
        data.dc_frames(store, run)

    out = {
        name: timed(fn)
        for name, fn in (
            ("fleet", fleet),
            ("device", device_page),
            ("experiments", experiments),
            ("fl_rounds", rounds),
            ("datacenter", datacenter),
        )
    }
    store.close()
    return out


def render_times(path: Path) -> dict[str, dict[str, float]]:
    """Each page's full script run (queries + shaping + chart specs) under AppTest."""
    from streamlit.testing.v1 import AppTest

    os.environ["DARTFL_STORE"] = str(path)
    os.environ.pop("DARTFL_BROKER", None)
    out: dict[str, dict[str, float]] = {}
    pages = {
        "Fleet": "routes/fleet.py",
        "Device": "routes/device.py",
        "FL rounds": "routes/rounds.py",
        "Experiments": "routes/experiments.py",
        "Datacenter": "routes/datacenter.py",
    }
    for page, script in pages.items():
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
        at.run()

        def run(at: AppTest = at, script: str = script) -> None:
            at.switch_page(script).run()
            if at.exception:
                raise RuntimeError(at.exception[0].value)

        run()  # warm: first run opens the store
        out[page] = timed(run, repeat=3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=3600)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.sqlite"
        result: dict[str, Any] = {"devices": args.devices, "seconds": args.seconds}
        result["fill"] = fill(path, args.devices, args.seconds)
        result["queries"] = query_times(path)
        result["render"] = render_times(path)
    print_json(result, args.out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
