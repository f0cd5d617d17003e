"""The model directory: what an export writes, that it is atomic, and that it leaves the
caller's model alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dartfl.errors import InputError
from edge_client import model_dir
from edge_client.inference import InferenceEngine
from edge_client.model_dir import MANIFEST, export_onnx
from fltask.model import build_model, get_weights

if TYPE_CHECKING:
    from .conftest import ExportedModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_export_writes_one_file_per_task_and_a_manifest(exported_pair: tuple[ExportedModel, ...]) -> None:
    first = exported_pair[0]
    files = sorted(p.name for p in first.directory.iterdir())
    assert files == ["digits.onnx", "fashion.onnx", "manifest.json", "uci-digits.onnx", "weights.npz"]
    manifest = json.loads((first.directory / MANIFEST).read_text())
    assert manifest["version"] == 1
    assert manifest["input"]["shape"] == [None, 1, 28, 28]
    assert manifest["tasks"]["uci-digits"] == {"file": "uci-digits.onnx", "num_classes": 10}
    leftovers = [p.name for p in first.directory.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_export_refuses_an_existing_directory_unless_told(tmp_path: Path) -> None:
    model = build_model({"a": 4})
    export_onnx(model, tmp_path / "m", version=1)
    with pytest.raises(InputError, match="already exists"):
        export_onnx(model, tmp_path / "m", version=2)
    export_onnx(model, tmp_path / "m", version=2, overwrite=True)
    assert InferenceEngine(tmp_path / "m").version == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_failed_export_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = model_dir._export_one
    calls = []

    def fail_on_second(model: object, task: str, path: Path) -> None:
        calls.append(task)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        real(model, task, path)  # type: ignore[arg-type]

    monkeypatch.setattr(model_dir, "_export_one", fail_on_second)
    with pytest.raises(RuntimeError, match="disk full"):
        export_onnx(build_model({"a": 4, "b": 4}), tmp_path / "m", version=1)
    assert list(tmp_path.iterdir()) == []


def test_export_leaves_the_callers_model_as_it_was(tmp_path: Path) -> None:
    model = build_model({"a": 4})
    before = get_weights(model)
    export_onnx(model, tmp_path / "m", version=0)
    assert model.training  # exported from an eval-mode copy
    after = get_weights(model)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    with pytest.raises(InputError, match="version must be an integer >= 0, got -1"):
        export_onnx(model, tmp_path / "n", version=-1)
