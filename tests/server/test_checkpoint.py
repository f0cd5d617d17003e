from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError
from server.checkpoint import KEEP, latest_checkpoint, save_checkpoint


def test_the_latest_complete_checkpoint_is_loaded(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "none") is None
    save_checkpoint(tmp_path, 1, {"w": np.ones(2)}, {"history": [1]})
    save_checkpoint(tmp_path, 2, {"w": np.full(2, 2.0)}, {"history": [1, 2]})
    (tmp_path / "round-0003.npz.tmp").write_bytes(b"half-written")  # a crash mid-write
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.server_round == 2
    assert ckpt.weights["w"].tolist() == [2.0, 2.0]
    assert ckpt.state["history"] == [1, 2]


def test_an_unreadable_newest_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    # After a power cut the newest JSON can be empty and its npz truncated; the run resumes
    # from the round before instead of refusing to start.
    for r in (1, 2, 3):
        save_checkpoint(tmp_path, r, {"w": np.full(2, float(r))}, {"history": list(range(r))})
    (tmp_path / "round-0003.json").write_text("")
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.server_round == 2 and ckpt.weights["w"].tolist() == [2.0, 2.0]
    (tmp_path / "round-0002.npz").write_bytes(b"PK\x03\x04 truncated")
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.server_round == 1
    (tmp_path / "round-0001.npz").unlink()
    with pytest.raises(ConfigError, match=r"no checkpoint .* is readable.*round-0003"):
        latest_checkpoint(tmp_path)


def test_only_the_last_rounds_are_kept(tmp_path: Path) -> None:
    for r in range(1, 7):
        save_checkpoint(tmp_path, r, {"w": np.zeros(2)}, {}, keep=KEEP)
    names = sorted(p.name for p in tmp_path.iterdir())
    kept = range(7 - KEEP, 7)
    assert names == sorted([f"round-{r:04d}.json" for r in kept] + [f"round-{r:04d}.npz" for r in kept])
