"""Inference throughput of ONNX Runtime against PyTorch eager on the edge model, one thread each.

For each model width and batch size: the same weights, exported with edge_client.inference,
served through InferenceEngine.infer (the agent's path, input check included) and through
PyTorch eager in inference mode (the cheapest eager path). Each side runs for `--seconds`,
`--repeats` times; the best repeat counts. Prints JSON; the issue's target is ONNX Runtime
at least 5x PyTorch eager at batch 32.

    .venv/bin/python benchmarks/onnx_vs_torch.py
    .venv/bin/python benchmarks/onnx_vs_torch.py --widths 1 4 --batches 1 32 --seconds 1
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from edge_client.inference import InferenceEngine, export_onnx
from edge_client.threads import cap_threads
from fltask.data import IMAGE_SHAPE, TASK_NAMES
from fltask.model import build_model

TASK = "digits"


def requests_per_s(call: Callable[[], object], batch: int, seconds: float, repeats: int) -> float:
    """Best throughput over `repeats` runs of `call` for about `seconds` each."""
    for _ in range(20):  # warm-up: allocators, caches, lazy initialisation
        call()
    best = 0.0
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            for _ in range(10):
                call()
            calls += 10
        best = max(best, calls * batch / elapsed)
    return best


def measure(
    width: float, batches: list[int], seconds: float, repeats: int, workdir: Path
) -> list[dict[str, object]]:
    model = build_model(dict.fromkeys(TASK_NAMES, 10), width=width, seed=0).eval()
    export_onnx(model, workdir / f"w{width}", version=0)
    engine = InferenceEngine(workdir / f"w{width}", threads=1)
    rows: list[dict[str, object]] = []
    for batch in batches:
        images = np.random.default_rng(0).random((batch, *IMAGE_SHAPE), dtype=np.float32)

        def torch_call(images: np.ndarray = images) -> object:
            with torch.inference_mode():
                return model(torch.from_numpy(images), TASK)

        def ort_call(images: np.ndarray = images) -> object:
            return engine.infer(TASK, images)

        ort_rps = requests_per_s(ort_call, batch, seconds, repeats)
        torch_rps = requests_per_s(torch_call, batch, seconds, repeats)
        rows.append(
            {
                "width": width,
                "parameters": model.num_parameters(),
                "batch": batch,
                "ort_requests_per_s": round(ort_rps, 1),
                "torch_requests_per_s": round(torch_rps, 1),
                "ort_batch_latency_us": round(batch / ort_rps * 1e6, 1),
                "torch_batch_latency_us": round(batch / torch_rps * 1e6, 1),
                "speedup": round(ort_rps / torch_rps, 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    threads = cap_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            row
            for w in args.widths
            for row in measure(w, args.batches, args.seconds, args.repeats, Path(tmp))
        ]
    report = {
        "benchmark": "onnx_vs_torch",
        "task": TASK,
        "threads": {"torch_intra_op": threads.intra_op, "ort_intra_op": 1},
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
        "machine": platform.machine(),
        "target": "ORT >= 5x torch eager at batch 32",
        "results": rows,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
