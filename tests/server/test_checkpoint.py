from __future__ import annotations

from pathlib import Path

import numpy as np

from server.checkpoint import latest_checkpoint, save_checkpoint


def test_the_latest_complete_checkpoint_is_loaded(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "none") is None
    save_checkpoint(tmp_path, 1, {"w": np.ones(2)}, {"history": [1]})
    save_checkpoint(tmp_path, 2, {"w": np.full(2, 2.0)}, {"history": [1, 2]})
    (tmp_path / "round-0003.npz.tmp").write_bytes(b"half-written")  # a crash mid-write
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.server_round == 2
    assert ckpt.weights["w"].tolist() == [2.0, 2.0]
    assert ckpt.state["history"] == [1, 2]
