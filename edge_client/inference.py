"""An ONNX Runtime engine for the exported multitask model, with atomic hot swap.

The engine serves a model directory (edge_client/model_dir.py: one ONNX file per task and a
checked manifest, written atomically by `export_onnx`, which this module re-exports). It swaps
model sets whole: a new set is loaded and warmed up off to the side, then replaces the old one in one
assignment under a lock; a batch already running finishes on the set it started with.

The engine runs on one ONNX Runtime execution provider, chosen by name (`ORT_PROVIDERS`: cpu,
the default; cuda and tensorrt on a Jetson or a GPU box with the onnxruntime-gpu wheel). One
that this ONNX Runtime lacks, or that a session does not take (CUDA libraries missing), falls
back to CPU with one warning; with `strict_provider` it is a ProviderError instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from dartfl.errors import ConfigError, InputError
from edge_client.model_dir import (
    INPUT_NAME,
    MANIFEST,
    OUTPUT_NAME,
    WEIGHTS,
    ModelLoadError,
    export_onnx,
    file_sha256,
    read_manifest,
)
from fltask.data import IMAGE_SHAPE
from fltask.model import MultitaskCNN

__all__ = [
    "MANIFEST",
    "ORT_PROVIDERS",
    "WEIGHTS",
    "InferenceEngine",
    "ModelLoadError",
    "ProviderError",
    "export_onnx",
    "file_sha256",
    "read_manifest",
    "torch_infer",
]

log = logging.getLogger(__name__)

MAX_BATCH = 4096
_CPU = "CPUExecutionProvider"
# `--ort-provider NAME` -> the providers a session is given, most wanted first. TensorRT falls
# back to CUDA for the nodes it cannot take, as ONNX Runtime documents.
ORT_PROVIDERS: dict[str, tuple[str, ...]] = {
    "cpu": (_CPU,),
    "cuda": ("CUDAExecutionProvider", _CPU),
    "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", _CPU),
}


class ProviderError(ConfigError):
    """The execution provider asked for strictly cannot serve here."""


def torch_infer(model: MultitaskCNN, task: str, images: np.ndarray) -> np.ndarray:
    """PyTorch eager logits for comparison with the engine (eval mode, no gradients)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits: np.ndarray = model(torch.tensor(_check_images(images)), task).numpy()
            return logits
    finally:
        model.train(was_training)


def _check_images(images: np.ndarray) -> np.ndarray:
    if not isinstance(images, np.ndarray) or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
        got = f"{images.dtype} {images.shape}" if isinstance(images, np.ndarray) else type(images).__name__
        raise InputError(f"images must be a float32 array of shape [b, 1, 28, 28], got {got}")
    if images.dtype != np.float32 or len(images) == 0:
        raise InputError(f"images must be float32 with b >= 1, got {images.dtype} with b = {len(images)}")
    return np.ascontiguousarray(images)


@dataclass(frozen=True)
class _ModelSet:
    """Every task's session of one model version; replaced whole, never edited."""

    version: int
    directory: Path
    sessions: Mapping[str, ort.InferenceSession]
    num_classes: Mapping[str, int]


class InferenceEngine:
    """ONNX Runtime sessions for every task of one model version, hot-swappable.

    `infer` is safe to call from many threads at once (ORT's `run` is thread-safe); `swap`
    may run concurrently with it.
    """

    def __init__(
        self, model_dir: str | Path, *, threads: int = 1, provider: str = "cpu", strict_provider: bool = False
    ) -> None:
        if not (isinstance(threads, int) and threads >= 1):
            raise InputError(f"threads must be an integer >= 1, got {threads!r}")
        if provider not in ORT_PROVIDERS:
            raise ConfigError(
                f"ONNX Runtime provider {provider!r} is unknown; valid: {', '.join(ORT_PROVIDERS)}"
            )
        self.threads = threads
        self.provider_name = provider
        self._strict = strict_provider
        self._providers = _available(provider, strict_provider)
        self._lock = threading.Lock()
        self._swap_lock = threading.Lock()  # one swap at a time; never held while serving
        self._current = self._load(Path(model_dir))
        # Sessions of the current version by intra-op threads, so a split that comes back to a
        # core count it had switches without rebuilding; a swap to a new version rebuilds each
        # of them, on the CPUs it was first built on (`_cpus`), before serving the new version.
        self._by_threads: dict[int, _ModelSet] = {threads: self._current}
        self._cpus: dict[int, frozenset[int] | None] = {threads: _thread_cpus()}

    @property
    def provider(self) -> str:
        """The execution provider that serves (e.g. CPUExecutionProvider after a fallback)."""
        return self._providers[0]

    @property
    def version(self) -> int:
        return self._snapshot().version

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self._snapshot().sessions)

    @property
    def model_dir(self) -> Path:
        return self._snapshot().directory

    def num_classes(self, task: str) -> int:
        return self._snapshot().num_classes[task]

    def infer(self, task: str, images: np.ndarray) -> np.ndarray:
        """Logits [b, classes] for float32 images [b, 1, 28, 28]."""
        return self.infer_with_version(task, images)[0]

    def infer_with_version(self, task: str, images: np.ndarray) -> tuple[np.ndarray, int]:
        """Logits and the version of the model that produced them (for replies and telemetry)."""
        batch = _check_images(images)
        current = self._snapshot()  # the whole batch runs on this set, whatever swaps meanwhile
        session = current.sessions.get(task)
        if session is None:
            raise InputError(f"unknown task {task!r}; the model serves: {', '.join(current.sessions)}")
        return session.run([OUTPUT_NAME], {INPUT_NAME: batch})[0], current.version

    def swap(self, model_dir: str | Path) -> int:
        """Load, check and warm up the model in `model_dir`, then serve it; returns its version.

        On any error the old model keeps serving and the error (ModelLoadError) propagates.
        The new model must serve every task the old one does.
        """
        with self._swap_lock:
            new = self._load(Path(model_dir))
            old = self._snapshot()
            lost = [t for t in old.sessions if t not in new.sessions]
            if lost:
                raise ModelLoadError(
                    f"{model_dir}: the new model lacks task(s) {', '.join(lost)}; not swapped"
                )
            # A split that moves later must not stall serving for a session build (issue 15:
            # 0.24 s a switch on the 2-core VM): the other pools are built now, off the lanes.
            serving = self.threads
            others = {}
            for threads in self._by_threads:
                if threads != serving:
                    self.threads = threads
                    try:
                        with _pinned(self._cpus.get(threads)):
                            others[threads] = self._load(Path(model_dir))
                    finally:
                        self.threads = serving
            with self._lock:
                self._current = new
            self._by_threads = {serving: new, **others}
        log.info("swapped model version %d -> %d (%s)", old.version, new.version, new.directory)
        return new.version

    def set_threads(self, threads: int) -> float:
        """Serve with `threads` intra-op threads from now on: the current model's sessions are
        built (ORT fixes a session's pool when it is created) the first time, kept for the
        next time, and swapped in whole, so a batch in flight finishes on the old ones. Build
        them on the thread whose CPUs the new pool should inherit (edge_client/core_pinning.py).
        Returns the seconds it took."""
        if not (isinstance(threads, int) and threads >= 1):
            raise InputError(f"threads must be an integer >= 1, got {threads!r}")
        t0 = time.perf_counter()
        with self._swap_lock:
            if threads != self.threads:
                current = self._snapshot()
                new = self._by_threads.get(threads)
                if new is None or new.version != current.version:
                    previous, self.threads = self.threads, threads
                    try:
                        new = self._load(current.directory)
                    except BaseException:
                        self.threads = previous
                        raise
                    self._by_threads[threads] = new
                    self._cpus[threads] = _thread_cpus()
                self.threads = threads
                with self._lock:
                    self._current = new
        return time.perf_counter() - t0

    @property
    def prepared_threads(self) -> tuple[int, ...]:
        """The intra-op thread counts whose sessions of the current version are built."""
        version = self.version
        return tuple(sorted(t for t, models in self._by_threads.items() if models.version == version))

    def _snapshot(self) -> _ModelSet:
        with self._lock:
            return self._current

    def _load(self, directory: Path) -> _ModelSet:
        manifest = read_manifest(directory)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions, classes = {}, {}
        for task, info in manifest["tasks"].items():
            path = directory / info["file"]
            try:
                session = self._session(path, options)
                # Warm up at two batch sizes: the first run allocates; a model that cannot
                # produce [b, classes] is caught here, before it serves anyone.
                for b in (1, 2):
                    out = session.run([OUTPUT_NAME], {INPUT_NAME: np.zeros((b, *IMAGE_SHAPE), np.float32)})[0]
                    if out.shape != (b, info["num_classes"]):
                        raise ModelLoadError(
                            f"{path}: output shape {out.shape} for a batch of {b}, "
                            f"the manifest promises ({b}, {info['num_classes']})"
                        )
            except (ModelLoadError, ProviderError):
                raise
            except Exception as exc:  # onnxruntime raises its own exception types
                raise ModelLoadError(f"{path}: cannot load task {task!r}: {exc}") from exc
            sessions[task], classes[task] = session, info["num_classes"]
        return _ModelSet(manifest["version"], directory, sessions, classes)

    def _session(self, path: Path, options: ort.SessionOptions) -> ort.InferenceSession:
        """A session on the engine's providers. ONNX Runtime drops a provider it cannot start
        (CUDA libraries missing, say) with a log line only: seen here, it falls back to CPU for
        good, or is a ProviderError when strict."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # ORT's own "not available" warning
            session = ort.InferenceSession(str(path), options, providers=list(self._providers))
        serving = session.get_providers()[0]
        if serving != self._providers[0]:
            reason = f"a session on {path.name} did not start {self._providers[0]} (it runs on {serving})"
            self._providers = _fallback(self.provider_name, reason, self._strict)
        return session


def _available(provider: str, strict: bool) -> tuple[str, ...]:
    """The providers to give sessions: ORT_PROVIDERS[provider], or CPU alone (with a warning,
    or a ProviderError when strict) if this ONNX Runtime lacks the wanted one."""
    wanted = ORT_PROVIDERS[provider]
    present = ort.get_available_providers()
    if wanted[0] in present:
        return tuple(p for p in wanted if p in present)
    return _fallback(provider, f"this ONNX Runtime has no {wanted[0]} (it has {', '.join(present)})", strict)


def _fallback(provider: str, reason: str, strict: bool) -> tuple[str, ...]:
    hint = (
        "install the onnxruntime-gpu wheel that matches your JetPack or CUDA (docs/deployment.md, section 1)"
    )
    if strict:
        raise ProviderError(f"--ort-provider {provider} --ort-strict: {reason}; {hint}, or drop --ort-strict")
    log.warning("--ort-provider %s: %s; serving on CPU (%s)", provider, reason, hint)
    return (_CPU,)


def _thread_cpus() -> frozenset[int] | None:
    """The CPUs the calling thread may run on (None where the OS does not say)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


@contextlib.contextmanager
def _pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """Run the block on `cpus` (an ORT pool's threads inherit them), then restore the mask."""
    before = _thread_cpus()
    if cpus is None or before is None or cpus == before:
        yield
        return
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:  # a CPU set the process may no longer use: build on the current one
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
