"""The numerical half of make test-arm64's smoke test: torch and ONNX Runtime give the right numbers.

    numerics.py reference DIR           on the host (x86_64): write the known values
    numerics.py check DIR --cpu MODEL   in the emulated Pi (arm64): recompute and compare

`reference` builds DART-FL's multitask model at a fixed seed, exports it with the project's
own ONNX exporter, and saves into DIR the weights, a fixed input batch, ONNX Runtime's and
PyTorch's logits on it, and the losses and weights after a few SGD steps with backward.
`check` first checks the machine: the emulated CPU model is the one asked for (from the
HWCAP bits the process sees), and torch is a CPU build with no NVIDIA packages installed.
Then it runs the same ONNX file in onnxruntime, loads the same weights into torch, trains
the same steps, exports the trained model to ONNX again and serves it: every number must
match the host's within float32 tolerances. Each step prints its duration (everything is
20-400x slower under emulation).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

TASKS = {"digits": 10, "uci-digits": 10}
SEED = 0
BATCH = 16
TRAIN_STEPS = 4
LEARNING_RATE = 0.05
# float32 results of the same graph on x86 (AVX kernels) and on arm64 (NEON kernels) differ in
# summation order only: ~1e-7 relative here. These bounds are ~100x that, and far below what
# a wrong kernel gives (logits are ~0.1, a wrong value is off by that much).
LOGITS_TOL = {"rtol": 1e-4, "atol": 1e-5}
TRAINED_TOL = {"rtol": 1e-3, "atol": 1e-4}  # four optimizer steps compound the rounding
# Linux arm64 HWCAP bits (asm/hwcap.h): what the (emulated) CPU tells a process it has.
AT_HWCAP = 16
HWCAP_ATOMICS = 1 << 8  # LSE atomics (ldaddal...): ARMv8.1, so the A76 has them, the A72 not
HWCAP_ASIMDDP = 1 << 20  # dot product: ARMv8.2 (A76)
EXPECTED_HWCAP = {
    "cortex-a72": {"atomics": False, "asimddp": False},
    "cortex-a76": {"atomics": True, "asimddp": True},
}


def project() -> SimpleNamespace:
    """DART-FL's own model and exporter: the only project modules this script imports.

    Module paths move as the packages are reorganised; update them here and nowhere else. The
    wheel (the device's venv) installs them as dartfl_<folder>; a checkout (the host's known
    values, an editable install) has the folders' own names.
    """
    try:
        from dartfl_edge_client.inference import export_onnx
        from dartfl_fltask.model import build_model, get_weights, set_weights
    except ModuleNotFoundError as exc:
        if exc.name not in ("dartfl_edge_client", "dartfl_fltask"):
            raise  # the wheel is there but something it needs is not
        from edge_client.inference import export_onnx
        from fltask.model import build_model, get_weights, set_weights

    return SimpleNamespace(
        build_model=build_model, get_weights=get_weights, set_weights=set_weights, export_onnx=export_onnx
    )


@contextmanager
def step(name: str) -> Iterator[None]:
    """Print a step and its duration, so a slow emulated run shows where the time goes."""
    print(f"  {name} ...", flush=True)
    start = time.monotonic()
    yield
    print(f"  {name}: ok ({time.monotonic() - start:.1f} s)", flush=True)


def fail(message: str) -> None:
    raise SystemExit(f"numerics: FAIL: {message}")


# ---------------------------------------------------------------------------- the computations


def inputs() -> tuple[np.ndarray, np.ndarray]:
    """A fixed batch of images in [0, 1] and labels (seeded numpy: the same bytes everywhere)."""
    rng = np.random.default_rng(1234)
    x = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=BATCH).astype(np.int64)
    return x, y


def ort_logits(onnx_path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # one thread per work item, as the agent runs it
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, {session.get_inputs()[0].name: x})[0]
    return out


def torch_logits(model: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    import torch

    model.eval()
    with torch.no_grad():
        return {task: model(torch.from_numpy(x), task).numpy() for task in TASKS}


def train(model: Any, x: np.ndarray, y: np.ndarray) -> list[float]:
    """A few SGD steps (momentum, as the agent's trainer), alternating the tasks' heads."""
    import torch
    import torch.nn.functional as F  # noqa: N812 (the conventional name)

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    losses = []
    for i in range(TRAIN_STEPS):
        task = list(TASKS)[i % len(TASKS)]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xt, task), yt)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def export_and_serve(p: SimpleNamespace, model: Any, directory: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    paths = p.export_onnx(model, directory, version=1)
    return {task: ort_logits(paths[task], x) for task in TASKS}


# ---------------------------------------------------------------------------- the two commands


def reference(out: Path) -> None:
    import torch

    torch.set_num_threads(1)
    p = project()
    out.mkdir(parents=True, exist_ok=True)
    x, y = inputs()
    model = p.build_model(TASKS, width=1.0, seed=SEED)
    np.savez(out / "initial.npz", **p.get_weights(model))
    onnx_paths = p.export_onnx(model, out / "model", version=0)
    np.savez(
        out / "expected.npz",
        x=x,
        y=y,
        **{f"ort.{t}": ort_logits(onnx_paths[t], x) for t in TASKS},
        **{f"torch.{t}": v for t, v in torch_logits(model, x).items()},
    )
    losses = train(model, x, y)
    trained_ort = export_and_serve(p, model, out / "trained-model", x)
    np.savez(out / "trained.npz", **p.get_weights(model), **{f"ort.{t}": v for t, v in trained_ort.items()})
    (out / "expected.json").write_text(
        json.dumps({"losses": losses, "torch": torch.__version__, "tasks": TASKS}, indent=1) + "\n"
    )
    print(f"numerics: reference written to {out} (torch {torch.__version__}, losses {losses})")


def hwcap() -> int:
    """AT_HWCAP from /proc/self/auxv (qemu-user fills it in from the emulated CPU model)."""
    data = Path("/proc/self/auxv").read_bytes()
    for key, value in struct.iter_unpack("<QQ", data):
        if key == AT_HWCAP:
            return int(value)
    fail("no AT_HWCAP in /proc/self/auxv")
    return 0


def check_cpu(cpu: str) -> None:
    import platform

    if platform.machine() != "aarch64":
        fail(f"this is {platform.machine()}, not aarch64: the check must run inside the arm64 chroot")
    caps = hwcap()
    seen = {"atomics": bool(caps & HWCAP_ATOMICS), "asimddp": bool(caps & HWCAP_ASIMDDP)}
    if seen != EXPECTED_HWCAP[cpu]:
        fail(f"the CPU features {seen} are not a {cpu}'s {EXPECTED_HWCAP[cpu]}: is QEMU_CPU={cpu} set?")
    print(f"  cpu: aarch64, HWCAP {caps:#x} {seen}, as a {cpu}")


def check_cpu_build() -> None:
    """torch must be the CPU build: the CUDA one is 2.9 GB and dies on a Cortex-A72 (SIGILL)."""
    import torch

    nvidia = sorted(
        name
        for dist in importlib.metadata.distributions()
        if (name := dist.metadata["Name"] or "").lower().startswith(("nvidia-", "cuda-", "triton"))
    )
    if torch.version.cuda is not None or nvidia:
        fail(
            f"torch {torch.__version__} is a CUDA build (torch.version.cuda={torch.version.cuda}, "
            f"NVIDIA packages: {', '.join(nvidia) or 'none'}); a Raspberry Pi needs the CPU build: "
            "pin torch==2.9.1 for platform_machine == 'aarch64' in pyproject.toml"
        )
    print(f"  torch {torch.__version__} is a CPU build (torch.version.cuda is None, no NVIDIA packages)")


def compare(
    what: str, got: np.ndarray, want: np.ndarray, tol: dict[str, float], against: str = "host"
) -> None:
    """`got` (computed here) must match `want` (from `against`) within `tol`."""
    diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("nan")
    if got.shape != want.shape or not np.allclose(got, want, **tol):
        bound = f"rtol {tol['rtol']:g}, atol {tol['atol']:g}"
        fail(f"{what}: max |arm64 - {against}| = {diff:.3g} exceeds {bound}")
    print(f"  {what}: max |arm64 - {against}| = {diff:.2g}")


def check(ref: Path, cpu: str, work: Path) -> None:
    with step("cpu model"):
        check_cpu(cpu)
    with step("import torch, onnxruntime, onnx"):
        import onnx
        import onnxruntime as ort
        import torch

        torch.set_num_threads(1)
        print(f"  torch {torch.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    with step("torch build"):
        check_cpu_build()
    p = project()
    expected = np.load(ref / "expected.npz")
    x, y = expected["x"], expected["y"]
    known = json.loads((ref / "expected.json").read_text())
    with step("ONNX Runtime inference on the host's ONNX files"):
        for task in TASKS:
            logits = ort_logits(ref / "model" / f"{task}.onnx", x)
            compare(f"onnxruntime {task}", logits, expected[f"ort.{task}"], LOGITS_TOL)
    with step("torch forward with the host's weights"):
        model = p.build_model(TASKS, width=1.0, seed=SEED)
        p.set_weights(model, dict(np.load(ref / "initial.npz")))
        for task, logits in torch_logits(model, x).items():
            compare(f"torch {task}", logits, expected[f"torch.{task}"], LOGITS_TOL)
    with step(f"{TRAIN_STEPS} training steps with backward"):
        losses = train(model, x, y)
        compare("losses", np.array(losses), np.array(known["losses"]), TRAINED_TOL)
        if not losses[-1] < losses[0]:
            fail(f"training did not lower the loss: {losses}")
        trained = np.load(ref / "trained.npz")
        weights = p.get_weights(model)
        worst = max(float(np.max(np.abs(weights[k] - trained[k]))) for k in weights)
        if worst > TRAINED_TOL["atol"] * 10:
            fail(f"weights after training: max |arm64 - host| = {worst:.3g}")
        print(f"  weights after training: max |arm64 - host| = {worst:.2g}")
    with step("ONNX export of the trained model, served by ONNX Runtime"):
        served = export_and_serve(p, model, work / "trained-model", x)
        eager = torch_logits(model, x)
        for task in TASKS:
            compare(f"exported {task}", served[task], eager[task], LOGITS_TOL, against="torch here")
            compare(f"exported {task}", served[task], trained[f"ort.{task}"], TRAINED_TOL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ref = sub.add_parser("reference", help="write the known values (host)")
    ref.add_argument("dir", type=Path)
    chk = sub.add_parser("check", help="recompute and compare (arm64)")
    chk.add_argument("dir", type=Path)
    chk.add_argument("--cpu", required=True, choices=sorted(EXPECTED_HWCAP))
    chk.add_argument("--work", type=Path, default=Path("/tmp/numerics"), help="scratch directory")
    args = parser.parse_args()
    commands: dict[str, Callable[[], None]] = {
        "reference": lambda: reference(args.dir),
        "check": lambda: check(args.dir, args.cpu, args.work),
    }
    commands[args.command]()
    if args.command == "check":
        print("numerics: all values match the host's")


if __name__ == "__main__":
    sys.exit(main())
