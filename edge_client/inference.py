"""ONNX export of the multitask model and an ONNX Runtime engine with atomic hot swap.

A model directory holds one ONNX file per task (the trunk plus that task's head, dynamic
batch dimension, weights inside the file), the PyTorch weights (`weights.npz`, so training
can resume from this version after a restart) and `manifest.json`:

    {"format": "dartfl-edge-model", "format_version": 1, "version": 3,
     "input": {"name": "x", "shape": [null, 1, 28, 28], "dtype": "float32"},
     "output": {"name": "logits"},
     "tasks": {"digits": {"file": "digits.onnx", "num_classes": 10}, ...},
     "weights": "weights.npz", "sha256": {"digits.onnx": "9f2c...", "weights.npz": "...", ...}}

Export writes into a hidden temporary directory next to the target, fsyncs every file and the
directory, and renames it into place, so a reader sees either no model directory or a
complete one; the checksums let a reader tell a complete one from a damaged one
(edge_client/model_versions.py). The engine swaps model sets
whole: a new set is loaded and warmed up off to the side, then replaces the old one in one
assignment under a lock; a batch already running finishes on the set it started with.

The engine runs on one ONNX Runtime execution provider, chosen by name (`ORT_PROVIDERS`: cpu,
the default; cuda and tensorrt on a Jetson or a GPU box with the onnxruntime-gpu wheel). One
that this ONNX Runtime lacks, or that a session does not take (CUDA libraries missing), falls
back to CPU with one warning; with `strict_provider` it is a ProviderError instead.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from dartfl.errors import ConfigError, InputError
from fltask.data import IMAGE_SHAPE
from fltask.model import MultitaskCNN, get_weights

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

MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"  # the PyTorch state dict as numpy arrays (no pickle to load)
FORMAT = "dartfl-edge-model"
FORMAT_VERSION = 1
MAX_BATCH = 4096
_INPUT, _OUTPUT = "x", "logits"
_CPU = "CPUExecutionProvider"
# `--ort-provider NAME` -> the providers a session is given, most wanted first. TensorRT falls
# back to CUDA for the nodes it cannot take, as ONNX Runtime documents.
ORT_PROVIDERS: dict[str, tuple[str, ...]] = {
    "cpu": (_CPU,),
    "cuda": ("CUDAExecutionProvider", _CPU),
    "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", _CPU),
}


class ModelLoadError(InputError):
    """A model directory cannot be served (missing or bad manifest, unreadable ONNX file)."""


class ProviderError(ConfigError):
    """The execution provider asked for strictly cannot serve here."""


class _OneTask(nn.Module):
    """The trunk and one head as a single-input module, the shape torch.onnx.export wants."""

    def __init__(self, model: MultitaskCNN, task: str) -> None:
        super().__init__()
        self.model = model
        self.task = task

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(x, self.task)
        return logits


def export_onnx(
    model: MultitaskCNN, directory: str | Path, *, version: int, overwrite: bool = False
) -> dict[str, Path]:
    """Write one ONNX file per task, the weights and the manifest into `directory`, atomically.

    Call it between microbatches (it copies the weights first). Returns {task: path of its
    ONNX file}. `directory` must not exist unless `overwrite`
    (then the old one is moved aside and removed: export each version to a new directory to
    keep a reader from ever finding none).
    """
    if not (isinstance(version, int) and version >= 0):
        raise InputError(f"model version must be an integer >= 0, got {version!r}")
    target = Path(directory)
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists; export each model version to a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    # A private eval-mode copy: the caller's model keeps its mode and may train on afterwards.
    frozen = copy.deepcopy(model).eval()
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tasks: dict[str, dict[str, Any]] = {}
    try:
        for task, classes in frozen.task_classes.items():
            path = tmp / f"{task}.onnx"
            _export_one(frozen, task, path)
            tasks[task] = {"file": path.name, "num_classes": classes}
        with (tmp / WEIGHTS).open("wb") as out:
            np.savez(out, allow_pickle=False, **get_weights(frozen))
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "version": version,
            "input": {"name": _INPUT, "shape": [None, *IMAGE_SHAPE], "dtype": "float32"},
            "output": {"name": _OUTPUT},
            "tasks": tasks,
            "weights": WEIGHTS,
            "sha256": {path.name: file_sha256(path) for path in sorted(tmp.iterdir())},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        for path in tmp.iterdir():
            _fsync(path)
        _fsync(tmp)  # the entries themselves, before the rename publishes them
        if target.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            target.rename(aside / target.name)
            shutil.rmtree(aside)
        tmp.rename(target)
        _fsync(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("exported model version %d for tasks %s to %s", version, ", ".join(tasks), target)
    return {task: target / info["file"] for task, info in tasks.items()}


def _export_one(model: MultitaskCNN, task: str, path: Path) -> None:
    # The TorchScript exporter (dynamo=False): for this plain conv/linear graph it writes the
    # same model as the dynamo exporter (outputs agree to 1e-7) about 40x faster (~20 ms
    # against ~600 ms per task here), and a hot swap's export competes with serving for the
    # CPU and the GIL, so its length is latency.
    wrapper = _OneTask(model, task).eval()
    example = torch.zeros(2, *IMAGE_SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (FutureWarning, DeprecationWarning, UserWarning))
        torch.onnx.export(
            wrapper,
            (example,),
            str(path),
            input_names=[_INPUT],
            output_names=[_OUTPUT],
            dynamic_axes={_INPUT: {0: "batch"}, _OUTPUT: {0: "batch"}},
            dynamo=False,
            verbose=False,
        )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


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
        # core count it had switches without rebuilding; a swap to a new version clears it.
        self._by_threads: dict[int, _ModelSet] = {threads: self._current}

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
        return session.run([_OUTPUT], {_INPUT: batch})[0], current.version

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
            with self._lock:
                self._current = new
            self._by_threads = {self.threads: new}
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
                self.threads = threads
                with self._lock:
                    self._current = new
        return time.perf_counter() - t0

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
                    out = session.run([_OUTPUT], {_INPUT: np.zeros((b, *IMAGE_SHAPE), np.float32)})[0]
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


def read_manifest(directory: Path) -> dict[str, Any]:
    """The checked manifest of a model directory, or ModelLoadError saying what is wrong."""
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelLoadError(f"{path}: no manifest; is {directory} a model exported by export_onnx?") from exc
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ModelLoadError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ModelLoadError(
            f"{path}: manifest format_version {manifest.get('format_version')!r}, "
            f"this engine reads {FORMAT_VERSION}"
        )
    version, tasks = manifest.get("version"), manifest.get("tasks")
    if not (isinstance(version, int) and version >= 0):
        raise ModelLoadError(f"{path}: version must be an integer >= 0, got {version!r}")
    if not isinstance(tasks, dict) or not tasks:
        raise ModelLoadError(f"{path}: 'tasks' must map at least one task to its file")
    for task, info in tasks.items():
        ok = (
            isinstance(info, dict)
            and isinstance(info.get("file"), str)
            and isinstance(info.get("num_classes"), int)
        )
        if not ok or "/" in info["file"] or info["file"].startswith("."):
            raise ModelLoadError(
                f"{path}: task {task!r} needs a plain 'file' name and an integer 'num_classes'"
            )
    return manifest
