"""A checkpoint after every round, so a restarted server resumes where it crashed.

One directory per run: `round-NNNN.npz` holds the global weights, `round-NNNN.json` the state
needed to go on (round number, metric history, counters, run-store id). Both are written to a
temporary name and renamed, and the JSON is written last: a checkpoint exists only once it is
complete, so a crash mid-write leaves the previous round's checkpoint as the latest.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.errors import ConfigError

__all__ = ["Checkpoint", "latest_checkpoint", "save_checkpoint"]

_NAME = re.compile(r"^round-(\d{4,})\.json$")


@dataclass(frozen=True)
class Checkpoint:
    server_round: int
    weights: dict[str, np.ndarray]
    state: dict[str, Any]


def save_checkpoint(
    directory: str | Path, server_round: int, weights: dict[str, np.ndarray], state: dict[str, Any]
) -> Path:
    """Write the round's checkpoint atomically; returns the JSON path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"round-{server_round:04d}"
    tmp_npz = stem.with_suffix(".npz.tmp")
    with open(tmp_npz, "wb") as fh:
        np.savez(fh, **weights)  # type: ignore[arg-type]
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp_npz, stem.with_suffix(".npz"))
    tmp_json = stem.with_suffix(".json.tmp")
    tmp_json.write_text(json.dumps({"server_round": server_round, **state}))
    os.replace(tmp_json, stem.with_suffix(".json"))
    return stem.with_suffix(".json")


def latest_checkpoint(directory: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint in `directory`, or None if there is none."""
    d = Path(directory)
    if not d.is_dir():
        return None
    rounds = sorted(int(m.group(1)) for p in d.iterdir() if (m := _NAME.match(p.name)))
    if not rounds:
        return None
    stem = d / f"round-{rounds[-1]:04d}"
    try:
        state = json.loads(stem.with_suffix(".json").read_text())
        with np.load(stem.with_suffix(".npz"), allow_pickle=False) as npz:
            weights = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"checkpoint {stem} is unreadable ({exc}); delete it to start over") from exc
    server_round = int(state.pop("server_round"))
    return Checkpoint(server_round, weights, state)
