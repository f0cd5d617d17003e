"""The model versions an agent keeps in its `--model-dir`, and the one a restart serves.

Each version is a folder `v<N>` written atomically by `export_onnx` (a hidden `.v<N>.*` folder,
fsynced, renamed into place): one ONNX file per task, the PyTorch weights (`weights.npz`) and a
manifest with every file's SHA-256. So after a crash the folder holds complete versions, at
most one hidden half-written export (the crash interrupted it), and versions damaged since
(a disk error, an operator's mistake), which only the checksums tell from complete ones.

A restarted agent (`recover`) sweeps the half-written exports, then tries the versions newest
first: the first one whose files match their checksums and load is served, and training goes
on from its weights. A damaged one is set aside as `v<N>.damaged` (kept for a look, never
served again) with a one-line warning, and the one before it is tried. Weights that do not fit
the model the agent is configured for (other `--tasks` or `--width`) are not damage: the agent
stops with a ConfigError instead of setting aside every version it has.

The two newest versions are kept (`prune`): the one serving, and the one before as the fallback
should the newest turn out damaged; older ones and set-aside ones older than both are removed.

One agent at a time (`ModelDirLock`): an agent holds an exclusive `flock` on `LOCK_FILE` in the
folder for its life. Two agents on one folder swept each other's exports as "half-written" and
pruned each other's versions: the second one to start died with a FileNotFoundError traceback.
The kernel drops a flock when its holder dies, however it dies, so a lock left by a SIGKILLed
agent never blocks its restart.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, TypeVar

import numpy as np

from dartfl.errors import ConfigError, InputError
from edge_client.model_dir import WEIGHTS, ModelLoadError, file_sha256, read_manifest

log = logging.getLogger(__name__)

__all__ = [
    "KEEP",
    "LOCK_FILE",
    "ModelDirLock",
    "ModelVersions",
    "Recovered",
    "mismatch_error",
    "read_weights",
]

KEEP: Final = 2  # versions kept: the one serving and its fallback
LOCK_FILE: Final = ".agent.lock"  # holds the pid of the agent using the folder
_VERSION = re.compile(r"v(\d+)")
_DAMAGED = re.compile(r"v(\d+)\.damaged")
_PARTIAL = re.compile(r"\.v\d+\..+")  # export_onnx's temporary folders (and its `.old.` asides)

T = TypeVar("T")


@dataclass(frozen=True)
class Recovered(Generic[T]):
    """The version a restart serves and what `load` made of it."""

    version: int
    directory: Path
    loaded: T


class ModelVersions:
    """The version folders under one model directory (created if missing)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, version: int) -> Path:
        return self.root / f"v{version}"

    def versions(self) -> list[int]:
        """The complete-looking versions (`v<N>` folders), newest first."""
        return sorted(self._numbers(_VERSION), reverse=True)

    def next_version(self) -> int:
        """One past every version this folder has held, set-aside ones included, so a version
        number never names two models."""
        return max(self._numbers(_VERSION) | self._numbers(_DAMAGED), default=0) + 1

    def sweep_partial(self) -> list[str]:
        """Remove the hidden half-written exports a killed agent left; returns their names."""
        swept = [p.name for p in self.root.iterdir() if p.is_dir() and _PARTIAL.fullmatch(p.name)]
        for name in swept:
            shutil.rmtree(self.root / name, ignore_errors=True)
        if swept:
            log.info("removed %d half-written model export(s) from %s: %s", len(swept), self.root, swept)
        return swept

    def recover(self, load: Callable[[Path, dict[str, np.ndarray]], T]) -> Recovered[T] | None:
        """The newest version whose files are intact and that `load` accepts, or None.

        `load(directory, weights)` raises ModelLoadError when the version cannot be served
        (it is then set aside as damaged and the one before is tried); anything else it
        raises ends the search."""
        self.sweep_partial()
        tried: list[int] = []
        for version in self.versions():
            directory = self.path(version)
            try:
                loaded = load(directory, read_weights(directory, version))
            except ModelLoadError as exc:
                tried.append(version)
                self._set_aside(version, exc)
                continue
            if tried:
                log.warning("serving model version v%d of %s (newer: %s damaged)", version, self.root, tried)
            return Recovered(version, directory, loaded)
        return None

    def prune(self, keep: int = KEEP) -> None:
        """Keep the `keep` newest versions; remove older ones and set-aside ones older still."""
        kept = self.versions()[:keep]
        if len(kept) < keep:
            return
        oldest = kept[-1]
        for version in self.versions()[keep:]:
            shutil.rmtree(self.path(version), ignore_errors=True)
        for version in self._numbers(_DAMAGED):
            if version < oldest:
                shutil.rmtree(self.root / f"v{version}.damaged", ignore_errors=True)

    def _set_aside(self, version: int, why: ModelLoadError) -> None:
        aside = self.root / f"v{version}.damaged"
        shutil.rmtree(aside, ignore_errors=True)
        self.path(version).rename(aside)
        log.warning(
            "model version v%d in %s is damaged (%s): set aside as %s; trying the version before it",
            version,
            self.root,
            why,
            aside.name,
        )

    def _numbers(self, pattern: re.Pattern[str]) -> set[int]:
        return {
            int(match.group(1))
            for p in self.root.iterdir()
            if p.is_dir() and (match := pattern.fullmatch(p.name)) is not None
        }


class ModelDirLock:
    """An exclusive lock on a model directory, held from `acquire` until `release` (or the
    process's end). `acquire` raises ConfigError, one line naming the holder's pid, when
    another process (or another acquisition in this one) holds it."""

    def __init__(self, root: Path, fd: int) -> None:
        self.root = root
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, root: Path) -> ModelDirLock:
        path = root / LOCK_FILE
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children
        except OSError as exc:
            raise ConfigError(f"--model-dir {root}: cannot open its lock file {LOCK_FILE}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(f"--model-dir {root}: cannot lock {LOCK_FILE}: {exc}") from None
            raise ConfigError(
                f"--model-dir {root} is in use by another agent ({holder}); stop it, "
                "or give this agent another --model-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(root, fd)

    def release(self) -> None:
        """Let go (idempotent). The file stays: removing it would race a new holder's open."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the flock


def _holder(fd: int) -> str:
    """'pid N' from the lock file, as its holder wrote it ('pid unknown' before it has)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"


def read_weights(directory: Path, version: int) -> dict[str, np.ndarray]:
    """The PyTorch weights of the version in `directory`, after checking that its manifest
    names `version` and that every file it lists matches its checksum (ModelLoadError if not)."""
    manifest = read_manifest(directory)
    if manifest["version"] != version:
        raise ModelLoadError(f"{directory.name}: its manifest says version {manifest['version']}")
    weights_file, sums = manifest.get("weights"), manifest.get("sha256")
    if weights_file != WEIGHTS or not isinstance(sums, dict) or WEIGHTS not in sums:
        raise ModelLoadError(
            f"{directory.name}: no PyTorch weights (exported by an agent older than the resumable versions)"
        )
    for name, expected in sums.items():
        path = directory / str(name)
        if "/" in str(name) or not path.is_file():
            raise ModelLoadError(f"{directory.name}: {name} is missing")
        if file_sha256(path) != expected:
            raise ModelLoadError(f"{directory.name}: {name} does not match its checksum")
    try:
        with np.load(directory / WEIGHTS, allow_pickle=False) as stored:
            weights = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ModelLoadError(f"{directory.name}: unreadable {WEIGHTS}: {exc}") from exc
    diverged = [name for name, value in weights.items() if not np.isfinite(value).all()]
    if diverged:  # exported so, intact: training cannot go on from it
        raise ModelLoadError(f"{directory.name}: weights {diverged[:3]} hold NaN or infinite values")
    return weights


def mismatch_error(directory: Path, exc: InputError) -> ConfigError:
    """Weights that do not fit the configured model: the flags changed, the files are fine."""
    return ConfigError(
        f"--model-dir {directory.parent} holds model version {directory.name} of another model ({exc}); "
        "start the agent with the --tasks and --width it was trained with, or give it another --model-dir"
    )
