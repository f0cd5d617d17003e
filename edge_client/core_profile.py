"""`dartfl edge profile --cores N`: measure how this device's cores run the agent's work, the
`[cores]` table of its profile (docs/profiles.md, "Cores").

1. Speedups: an inference batch (ONNX Runtime, j intra-op threads, built on a thread pinned
   to the first j CPUs) and a training microbatch (PyTorch, j threads) on j = 1..N; each
   curve is the median time on one core over the median time on j.
2. Interference: one core serving while the other N - 1 train, both lanes pinned as the agent
   pins them (edge_client/core_pinning.py): f = (time beside the other lane) / (time alone) - 1
   per side, and never below 0 (noise).
3. Switch time: the serving lane's resize, the first build of a k-thread session set (the
   agent keeps them afterwards; the training lane's `torch.set_num_threads` costs microseconds).
Measured on the model the agent serves, with the trainer on a throwaway copy of it.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dartfl.errors import ConfigError
from dartfl.profiles import SUPERLINEAR_SPEEDUP
from dartfl.types import CoreModel
from edge_client.core_pinning import available_cpus, pin_current_thread

if TYPE_CHECKING:
    from edge_client.inference import InferenceEngine
    from edge_client.runtime import ModelRuntime

__all__ = ["measure_core_model"]

BATCH = 16
MICROBATCH = 16


def _median_s(work: Callable[[], object], reps: int) -> float:
    work()  # warm-up: the first run allocates
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _speedups(times: Sequence[float]) -> tuple[float, ...]:
    return (1.0, *(times[0] / t for t in times[1:]))


# A speedup the profile would refuse (dartfl.profiles: outside [1/j, 1.5 j]) is noise from
# other work on the CPUs: a 2-thread PyTorch step waits at its barrier for a thread the
# kernel gave to someone else, and once measured 115x slower than on one core. Measure such
# a core count again, this many times in all, before giving up with the fix.
MEASURE_TRIES = 3


def _plausible(one_core_s: float, j_cores_s: float, j: int) -> bool:
    speedup = one_core_s / j_cores_s
    return 1.0 / j <= speedup <= SUPERLINEAR_SPEEDUP * j


def _median_on(j: int, work: Callable[[], object], reps: int, one_core_s: float, what: str) -> float:
    """The median time of `work` on j cores (the caller has set them up), measured again while
    its speedup over `one_core_s` is one no profile may hold."""
    for _ in range(MEASURE_TRIES):
        seconds = _median_s(work, reps)
        if _plausible(one_core_s, seconds, j):
            return seconds
    raise ConfigError(
        f"{what} on {j} cores took {seconds / one_core_s:.3g}x its time on one core in "
        f"{MEASURE_TRIES} measurements: other work held these CPUs; rerun `dartfl edge profile` "
        "on a quiet device"
    )


def measure_core_model(
    runtime: ModelRuntime, count: int, *, quick: bool = True, progress: Callable[[str], None] | None = None
) -> CoreModel:
    """The core model of the first `count` CPUs this process may use."""
    from fltask.trainer import Trainer

    cpus = available_cpus()
    if not 2 <= count <= len(cpus):
        raise ConfigError(f"--cores must lie in 2..{len(cpus)} (the CPUs this process may use), got {count}")
    say = progress or (lambda _text: None)
    import torch

    engine, task = runtime.engine, runtime.engine.tasks[0]
    images = np.random.default_rng(0).random((BATCH, 1, 28, 28), dtype=np.float32)
    trainer = Trainer(copy.deepcopy(runtime.model), runtime.tasks, seed=1)
    k = len(runtime.tasks)
    shares, weights = [1.0 / k] * k, [1.0] * k
    reps = 5 if quick else 20
    threads_before, inter_before = engine.threads, torch.get_num_threads()

    def infer() -> object:
        return engine.infer(task, images)

    def train() -> object:
        return trainer.train_microbatch(MICROBATCH, shares, weights)

    inference_s: list[float] = []
    training_s: list[float] = []
    builds_s: list[float] = []
    try:
        for j in range(1, count + 1):
            say(f"inference and training on {j} of {count} cores")
            pin_current_thread(cpus[:j])
            engine.set_threads(j)  # the first build of j threads' sessions (an agent's start)
            if j > 1:  # the switch a running agent makes: back to sessions it has built
                engine.set_threads(j - 1)
                builds_s.append(engine.set_threads(j))
            inference_s.append(
                _median_on(j, infer, reps, inference_s[0], "inference") if j > 1 else _median_s(infer, reps)
            )
            torch.set_num_threads(j)
            training_s.append(
                _median_on(j, train, reps, training_s[0], "a training step")
                if j > 1
                else _median_s(train, reps)
            )
        say("interference: one core serving beside the others training")
        f_inf, f_tr = _interference(
            engine, infer, train, cpus[:count], reps, inference_s[0], training_s[count - 2]
        )
    finally:
        pin_current_thread(cpus)
        engine.set_threads(threads_before)
        torch.set_num_threads(inter_before)
    return CoreModel(
        count,
        _speedups(inference_s),
        _speedups(training_s),
        f_inf,
        f_tr,
        float(np.median(builds_s)) if builds_s else 0.0,
    )


def _interference(
    engine: InferenceEngine,
    infer: Callable[[], object],
    train: Callable[[], object],
    cpus: tuple[int, ...],
    reps: int,
    infer_alone_s: float,
    train_alone_s: float,
) -> tuple[float, float]:
    """Each side's slowdown beside the other: inference on cpus[0], training on the rest."""
    import torch

    stop = threading.Event()
    trained: list[float] = []

    def training_lane() -> None:
        pin_current_thread(cpus[1:])
        torch.set_num_threads(len(cpus) - 1)
        while not stop.is_set():
            t0 = time.perf_counter()
            train()
            trained.append(time.perf_counter() - t0)

    pin_current_thread(cpus[:1])
    engine.set_threads(1)
    lane = threading.Thread(target=training_lane, name="profile-training-lane")
    lane.start()
    try:
        served = []
        deadline = time.perf_counter() + max(1.0, reps * 4 * train_alone_s)
        while (time.perf_counter() < deadline or len(trained) < reps) and lane.is_alive():
            t0 = time.perf_counter()
            infer()
            served.append(time.perf_counter() - t0)
    finally:
        stop.set()
        lane.join()
    f_inf = float(np.median(served)) / infer_alone_s - 1.0
    f_tr = float(np.median(trained[1:] or trained)) / train_alone_s - 1.0
    return max(0.0, f_inf), max(0.0, f_tr)
