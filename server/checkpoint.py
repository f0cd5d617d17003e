"""A checkpoint after every round, so a restarted server resumes where it crashed.

One directory per run: `round-NNNN.npz` holds the global weights, `round-NNNN.json` the state
needed to go on (round number, metric history, counters, run-store id). Both are written to a
temporary name, flushed to disk and renamed, and the JSON is written last: a checkpoint exists
only once it is complete, so a crash mid-write leaves the previous round's checkpoint as the
latest. Should the newest one still be unreadable (a power cut that the disk did not survive
in order), the loader falls back to the newest readable one. Only the last `KEEP` rounds are
kept, so a long run does not fill the disk.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.errors import ConfigError

__all__ = ["KEEP", "Checkpoint", "latest_checkpoint", "save_checkpoint"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^round-(\d{4,})\.json$")
KEEP = 3  # rounds whose checkpoints are kept; older ones are deleted


@dataclass(frozen=True)
class Checkpoint:
    server_round: int
    weights: dict[str, np.ndarray]
    state: dict[str, Any]


def save_checkpoint(
    directory: str | Path,
    server_round: int,
    weights: dict[str, np.ndarray],
    state: dict[str, Any],
    keep: int = KEEP,
) -> Path:
    """Write the round's checkpoint atomically and durably, then delete all but the newest
    `keep` rounds; returns the JSON path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"round-{server_round:04d}"
    _write_durably(stem.with_suffix(".npz"), lambda fh: np.savez(fh, **weights))  # type: ignore[arg-type]
    body = json.dumps({"server_round": server_round, **state}).encode()
    _write_durably(stem.with_suffix(".json"), lambda fh: fh.write(body))
    for old in _rounds(d)[:-keep] if keep > 0 else []:
        for suffix in (".json", ".npz"):  # the JSON first: a half-deleted round is no checkpoint
            (d / f"round-{old:04d}").with_suffix(suffix).unlink(missing_ok=True)
    return stem.with_suffix(".json")


def _write_durably(path: Path, write: Any) -> None:
    """Write via a temporary file, fsync it, rename it over `path` and fsync the directory, so
    that after a power cut `path` holds either the old content or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _rounds(d: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in d.iterdir() if (m := _NAME.match(p.name)))


def latest_checkpoint(directory: str | Path) -> Checkpoint | None:
    """The newest readable checkpoint in `directory`, or None if there is none.

    An unreadable newer one is skipped with a warning; if none can be read, ConfigError."""
    d = Path(directory)
    if not d.is_dir():
        return None
    rounds = _rounds(d)
    problems = []
    for server_round in reversed(rounds):
        stem = d / f"round-{server_round:04d}"
        try:
            checkpoint = _load(stem)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            problems.append(f"{stem.name}: {exc}")
            log.warning("checkpoint %s is unreadable (%s); trying the one before", stem, exc)
            continue
        return checkpoint
    if problems:
        raise ConfigError(
            f"no checkpoint in {d} is readable ({'; '.join(problems)}); delete the directory to start over"
        )
    return None


def _load(stem: Path) -> Checkpoint:
    state = json.loads(stem.with_suffix(".json").read_text())
    if not isinstance(state, dict):
        raise ValueError("the state is not a JSON object")
    with np.load(stem.with_suffix(".npz"), allow_pickle=False) as npz:
        weights = {k: npz[k] for k in npz.files}
    server_round = int(state.pop("server_round"))
    return Checkpoint(server_round, weights, state)
