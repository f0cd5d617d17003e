"""The model side of one device: training data, the PyTorch model and trainer, and the ONNX
Runtime engine that serves it, behind the few calls the agent makes.

It also measures what work costs on this device (`calibrate`), the numbers the allocator plans
with and `dartfl edge profile` writes as a profile TOML that `dartfl sim` reads.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dartfl.errors import InputError
from dartfl.types import DeviceProfile, InferenceCost, TrainingCost
from edge_client.model_versions import ModelVersions, mismatch_error

if TYPE_CHECKING:  # the runtime loads torch and ONNX Runtime only when it is built
    from edge_client.agent_config import AgentConfig
    from edge_client.inference import InferenceEngine
    from fltask.data import TaskData
    from fltask.model import MultitaskCNN
    from fltask.trainer import MicrobatchResult, Trainer

log = logging.getLogger(__name__)

MAX_BATCH = 32
MAX_MICROBATCH = 32


MIN_FIXED_S = 1e-6  # no call into a runtime is free: a fitted 0 is noise, not a measurement


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of y = a + c x, fitted by least relative error (each residual over
    its y), unless noise drives the intercept to or below 0 (a near-linear cost with a small
    fixed part); then the line through the smallest and the largest x, which keeps the fixed
    cost the smallest x shows. a > 0, c > 0.

    Why relative: the largest sizes take 10-30 times as long as the smallest, so under plain
    least squares they decide the line, and a few percent of noise at x = 32 moves the
    intercept by more than the whole cost at x = 1. A width-24 calibration on a busy VM fitted
    66 ms + 43.5 ms a sample where one sample took 55-65 ms, so the one-sample step a tight
    SLO allows was priced at 110 ms and the agent and the simulator planned with twice its
    time (docs/profiles.md, "How `edge profile` fits a line")."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    slope, intercept = (float(v) for v in np.polyfit(x, y, 1, w=1.0 / np.maximum(y, 1e-9)))
    if intercept <= 0.0:
        lo, hi = int(np.argmin(x)), int(np.argmax(x))
        slope = (y[hi] - y[lo]) / (x[hi] - x[lo])
        intercept = y[lo] - slope * x[lo]
    return max(MIN_FIXED_S, intercept), max(1e-7, slope)


class ModelRuntime:
    def __init__(
        self,
        config: AgentConfig,
        tasks: Mapping[str, TaskData],
        model: MultitaskCNN,
        trainer: Trainer,
        engine: InferenceEngine,
        versions: ModelVersions,
    ):
        self.config = config
        self.tasks = tasks
        self.model = model
        self.trainer = trainer
        self.engine = engine
        self.versions = versions
        self.model_dir = versions.root
        self._export_lock = threading.Lock()
        self._next_version = versions.next_version()
        self._publisher: threading.Thread | None = None
        self._test_images = {name: (data.x_test, data.y_test) for name, data in tasks.items()}

    @classmethod
    def build(cls, config: AgentConfig, model_dir: Path) -> ModelRuntime:
        """Load the data and the model: the newest complete version in `model_dir` when there
        is one (a restart goes on serving and training it), fresh weights otherwise."""
        from edge_client.threads import cap_threads
        from fltask.data import load_tasks
        from fltask.model import build_model
        from fltask.trainer import Trainer

        cap_threads(config.training_threads)
        tasks = load_tasks(config.tasks, max_train=config.max_train_per_task, max_test=1000, seed=config.seed)
        model = build_model(
            {n: t.num_classes for n, t in tasks.items()}, width=config.width, seed=config.seed
        )
        versions = ModelVersions(model_dir)
        engine = _serve_newest(versions, model, config)
        trainer = Trainer(model, tasks, seed=config.seed)
        return cls(config, tasks, model, trainer, engine, versions)

    @property
    def version(self) -> int:
        return int(self.engine.version)

    def classify(self, task: str, images: np.ndarray) -> tuple[np.ndarray, int]:
        """Labels for a batch (float32, N x 1 x 28 x 28) and the model version that answered."""
        logits, version = self.engine.infer_with_version(task, images)
        return np.argmax(logits, axis=1), version

    def train(self, samples: int, shares: Sequence[float], loss_weights: Sequence[float]) -> MicrobatchResult:
        return self.trainer.train_microbatch(samples, shares, loss_weights)

    def set_inference_threads(self, threads: int) -> float:
        """Serve with `threads` intra-op threads (sessions rebuilt on the calling thread);
        returns the seconds the resize took."""
        return self.engine.set_threads(threads)

    def set_training_threads(self, threads: int) -> float:
        """Train with `threads` intra-op threads; returns the seconds the resize took."""
        import torch

        t0 = time.perf_counter()
        torch.set_num_threads(threads)
        return time.perf_counter() - t0

    def install_weights(self, weights: Mapping[str, np.ndarray]) -> int:
        """Load new global weights into the trainer and hot-swap them into serving."""
        from fltask.model import set_weights

        set_weights(self.model, weights)
        return self.publish_model()

    def start_round(
        self,
        weights: Mapping[str, np.ndarray],
        learning_rate: float | None = None,
        step_samples: int | None = None,
    ) -> None:
        """New global weights for a federated round (executor thread, between microbatches):
        drop the gradients accumulated on the old weights and the optimizer's momentum, load
        the weights into the trainer (at the round's learning rate and step size, if it sets
        them), and hot-swap them into serving (exported in the background, so serving never
        stalls)."""
        from fltask.model import set_weights

        trainer = self.trainer
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.optimizer.state.clear()
        if learning_rate is not None:
            trainer.set_learning_rate(learning_rate)
        trainer.pending_samples = 0
        if step_samples is not None:
            trainer.set_step_samples(step_samples)
        set_weights(self.model, weights)
        if self._publisher is not None:
            self._publisher.join()  # an export of the previous weights must not land after this one
        self.publish_in_background()

    def finish_round(self) -> dict[str, np.ndarray]:
        """End of a federated round: step on what has accumulated and return the trained weights."""
        from fltask.model import get_weights

        self.trainer.flush()
        return get_weights(self.model)

    def publish_model(self, model: MultitaskCNN | None = None) -> int:
        """Export the weights (of `model`, default the live one) as a new version and swap
        serving to it atomically; in-flight batches finish on the version they started on."""
        from edge_client.inference import export_onnx

        with self._export_lock:
            version = self._next_version
            self._next_version += 1
            target = self.versions.path(version)
            export_onnx(self.model if model is None else model, target, version=version)
            self.engine.swap(target)
            self.versions.prune()  # the previous version stays: the fallback should this one be damaged
            return version

    def publish_in_background(self) -> bool:
        """Snapshot the live weights now (between microbatches) and export and swap them in a
        background thread: an export takes seconds, far too long to stall serving. False if
        an export is still running."""
        if self._publisher is not None and self._publisher.is_alive():
            return False
        snapshot = copy.deepcopy(self.model)
        self._publisher = threading.Thread(
            target=self._publish_quietly, args=(snapshot,), name="model-publisher", daemon=True
        )
        self._publisher.start()
        return True

    def _publish_quietly(self, snapshot: MultitaskCNN) -> None:
        try:
            version = self.publish_model(snapshot)
            log.info("now serving model version %d", version)
        except Exception:  # a failed export must not take the device down: keep serving the old one
            log.exception("model export failed; still serving version %d", self.version)

    def sample_images(self, task: str, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Real test images (uint8, 28 x 28) and their labels, for load generation."""
        x, y = self._test_images[task]
        idx = rng.integers(0, len(y), count)
        return np.round(x[idx, 0] * 255).astype(np.uint8), y[idx]

    def calibrate(
        self, *, quick: bool = True, name: str = "measured", progress: Callable[[str], None] | None = None
    ) -> DeviceProfile:
        """Measure t_k(b) = a_k + c_k b per task and s(m) = a_T + c_T m on this device (the
        model's costs; `edge_client.request_path` measures the rest of a request's path).
        `progress` is told what is being measured, step by step."""
        from fltask.trainer import Trainer

        say = progress or (lambda _text: None)
        reps = 5 if quick else 30
        batch_sizes = (1, 4, 16, MAX_BATCH) if quick else (1, 2, 4, 8, 16, 24, MAX_BATCH)
        per_task: dict[str, InferenceCost] = {}
        for i, task in enumerate(self.tasks, 1):
            say(f"inference of {task} at batch sizes {list(batch_sizes)} ({i}/{len(self.tasks)})")
            xs, ys = [], []
            for b in batch_sizes:
                images = np.random.default_rng(b).random((b, 1, 28, 28), dtype=np.float32)
                self.engine.infer(task, images)  # warm-up
                for _ in range(reps):
                    t0 = time.perf_counter()
                    self.engine.infer(task, images)
                    xs.append(b)
                    ys.append(time.perf_counter() - t0)
            # The median per batch size resists a stray scheduler hiccup better than the mean.
            med = [float(np.median([y for x, y in zip(xs, ys, strict=True) if x == b])) for b in batch_sizes]
            fixed, per = fit_line(batch_sizes, med)
            per_task[task] = InferenceCost(fixed, per)
        # Train a throwaway copy so calibration does not move the real model.
        scratch = Trainer(copy.deepcopy(self.model), self.tasks, seed=1)
        k = len(self.tasks)
        shares, weights = [1.0 / k] * k, [1.0] * k
        steps = (1, 2, 4, 8, 16, MAX_MICROBATCH) if not quick else (1, 8, 16)
        step_reps = 3 if quick else 8
        med_steps = []
        for m in steps:
            say(f"training microbatch of {m} samples ({steps.index(m) + 1}/{len(steps)})")
            _crossing_microbatch_s(scratch, m, shares, weights)  # warm-up
            times = [_crossing_microbatch_s(scratch, m, shares, weights) for _ in range(step_reps)]
            med_steps.append(float(np.median(times)))
        a_t, c_t = fit_line(steps, med_steps)
        default = next(iter(per_task.values()))
        overrides = {t: c for t, c in per_task.items() if c != default}
        return DeviceProfile(
            name=name,
            inference=default,
            max_batch=MAX_BATCH,
            training=TrainingCost(a_t, c_t, MAX_MICROBATCH),
            task_inference=overrides,
            description=f"measured by dartfl edge profile (width {self.config.width}, "
            f"{self.config.inference_threads} inference / {self.config.training_threads} training threads, "
            f"inference on {self.engine.provider})",
        )

    def close(self) -> None:
        """Wait for a running export so no half-written version is left behind."""
        if self._publisher is not None:
            self._publisher.join(timeout=30.0)


def _crossing_microbatch_s(
    trainer: Trainer, m: int, shares: Sequence[float], weights: Sequence[float]
) -> float:
    """Seconds for an m-sample microbatch that crosses an optimizer step: a pass that completes
    the step, the step, and a pass over the rest (fltask/trainer.py). That is the dearest
    an m-sample microbatch gets (m <= step_samples crosses at most one step), and most of the
    allocator's microbatches do cross, so planning with it errs on the side of the SLO; timing
    microbatches as they fall would mix cheap and dear ones by chance. The untimed lead-in
    leaves the step m // 2 samples short (one sample for m = 1)."""
    trainer.flush()
    lead = trainer.step_samples - max(1, m // 2)
    if lead > 0:
        trainer.train_microbatch(lead, shares, weights)
    return float(trainer.train_microbatch(m, shares, weights).duration_s)


def _serve_newest(versions: ModelVersions, model: MultitaskCNN, config: AgentConfig) -> InferenceEngine:
    """An engine on the newest complete version, whose weights `model` takes on (training
    resumes from them); with none, `model`'s fresh weights exported as the next version."""
    from edge_client.inference import InferenceEngine, export_onnx
    from fltask.model import set_weights

    def engine_on(directory: Path) -> InferenceEngine:
        return InferenceEngine(
            directory,
            threads=config.inference_threads,
            provider=config.ort_provider,
            strict_provider=config.ort_strict,
        )

    def load(directory: Path, weights: dict[str, np.ndarray]) -> InferenceEngine:
        engine = engine_on(directory)  # ModelLoadError: damaged
        try:
            set_weights(model, weights)
        except InputError as exc:  # intact files of another model: the flags changed
            raise mismatch_error(directory, exc) from None
        return engine

    recovered = versions.recover(load)
    if recovered is not None:
        log.info("serving model version v%d from %s", recovered.version, versions.root)
        return recovered.loaded
    version = versions.next_version()
    if version > 1:
        log.warning("no complete model version in %s: serving fresh weights as v%d", versions.root, version)
    export_onnx(model, versions.path(version), version=version)
    return engine_on(versions.path(version))
