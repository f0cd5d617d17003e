"""What splitting a microbatch at the optimizer-step boundary costs (fltask/trainer.py).

A microbatch that crosses a `step_samples` boundary runs as two forward/backward passes. This
times 23-sample microbatches (DART's typical size in the FL headline) with `step_samples=32`,
split into those that cross and those that do not, against one pass plus a step.

    .venv/bin/python benchmarks/trainer_split.py [--widths 1 6] [--microbatch 23] [--reps 300]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from fltask.data import load_tasks
from fltask.model import build_model
from fltask.trainer import Trainer


def measure(width: int, microbatch: int, reps: int) -> dict[str, float | int]:
    tasks = load_tasks(("digits", "fashion", "uci-digits"), max_train=2000, max_test=100, seed=1)
    classes = {n: d.num_classes for n, d in tasks.items()}
    shares, weights = (1 / 3,) * 3, (1.0,) * 3
    split = Trainer(build_model(classes, width, seed=1), tasks, step_samples=32, seed=1)
    for _ in range(20):  # warm-up
        split.train_microbatch(microbatch, shares, weights)
    crossing, inside = [], []
    for _ in range(reps):
        crosses = split.pending_samples + microbatch > split.step_samples
        duration = split.train_microbatch(microbatch, shares, weights).duration_s
        (crossing if crosses else inside).append(duration)
    # One pass and a step: what a crossing microbatch cost before the split.
    whole = Trainer(build_model(classes, width, seed=1), tasks, step_samples=10**9, seed=1)
    one_pass = []
    for _ in range(reps // 3):
        t0 = time.perf_counter()
        whole.train_microbatch(microbatch, shares, weights)
        whole.flush()
        one_pass.append(time.perf_counter() - t0)
    return {
        "width": width,
        "microbatch": microbatch,
        "crossing_share": len(crossing) / reps,
        "crossing_ms": 1e3 * float(np.median(crossing)),
        "inside_ms": 1e3 * float(np.median(inside)),
        "one_pass_and_step_ms": 1e3 * float(np.median(one_pass)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 6])
    parser.add_argument("--microbatch", type=int, default=23)
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(w, args.microbatch, args.reps) for w in args.widths]
    print(json.dumps({"machine": platform.processor() or platform.machine(), "results": rows}, indent=1))


if __name__ == "__main__":
    main()
