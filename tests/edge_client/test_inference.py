"""ONNX Runtime serving against PyTorch, atomic hot swap, thread caps."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dartfl.errors import InputError
from edge_client.inference import MANIFEST, InferenceEngine, ModelLoadError, export_onnx, torch_infer
from fltask.data import TaskData
from fltask.model import build_model

if TYPE_CHECKING:
    from .conftest import ExportedModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_onnx_matches_pytorch_for_every_head(
    exported_pair: tuple[ExportedModel, ...], small_tasks: dict[str, TaskData], batch: int
) -> None:
    first = exported_pair[0]
    engine = InferenceEngine(first.directory)
    assert engine.tasks == tuple(small_tasks)
    for task, data in small_tasks.items():
        images = np.ascontiguousarray(data.x_test[:batch])
        onnx_out = engine.infer(task, images)
        assert onnx_out.shape == (batch, data.num_classes)
        np.testing.assert_allclose(onnx_out, torch_infer(first.model, task, images), rtol=1e-4, atol=1e-5)


def test_infer_checks_its_inputs(exported_pair: tuple[ExportedModel, ...]) -> None:
    engine = InferenceEngine(exported_pair[0].directory)
    with pytest.raises(
        InputError, match="unknown task 'cifar'; the model serves: digits, fashion, uci-digits"
    ):
        engine.infer("cifar", np.zeros((1, 1, 28, 28), np.float32))
    with pytest.raises(InputError, match=r"shape \[b, 1, 28, 28\], got float32 \(1, 28, 28\)"):
        engine.infer("digits", np.zeros((1, 28, 28), np.float32))
    with pytest.raises(InputError, match="float32"):
        engine.infer("digits", np.zeros((1, 1, 28, 28), np.float64))


def test_hot_swap_under_load_never_mixes_versions(exported_pair: tuple[ExportedModel, ...]) -> None:
    v1, v2 = exported_pair
    engine = InferenceEngine(v1.directory)
    images = np.random.default_rng(0).random((8, 1, 28, 28), dtype=np.float32)
    tasks = engine.tasks
    expected = {
        version: {t: torch_infer(m.model, t, images) for t in tasks} for version, m in ((1, v1), (2, v2))
    }
    errors: list[BaseException] = []
    seen = {1: 0, 2: 0}
    stop = threading.Event()
    lock = threading.Lock()

    def client(k: int) -> None:
        i = k
        while not stop.is_set():
            task = tasks[i % len(tasks)]
            i += 1
            try:
                logits, version = engine.infer_with_version(task, images)
                matches = [v for v in (1, 2) if np.allclose(logits, expected[v][task], rtol=1e-4, atol=1e-5)]
                assert matches == [version], f"{task}: reported v{version}, matches {matches}"
                with lock:
                    seen[version] += 1
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    target = None
    for n in range(10):
        target = v2 if n % 2 == 0 else v1
        assert engine.swap(target.directory) == target.version
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors[:3]
    assert seen[1] > 0 and seen[2] > 0
    assert target is not None and engine.version == target.version == 1
    assert engine.model_dir == v1.directory


def test_a_bad_swap_keeps_the_old_model_serving(
    exported_pair: tuple[ExportedModel, ...], tmp_path: Path
) -> None:
    v1 = exported_pair[0]
    engine = InferenceEngine(v1.directory)
    images = np.zeros((2, 1, 28, 28), np.float32)
    before = engine.infer("digits", images)

    with pytest.raises(ModelLoadError, match="no manifest"):
        engine.swap(tmp_path)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(v1.directory, corrupt)
    (corrupt / "fashion.onnx").write_bytes(b"\x08\x01 not a model")
    with pytest.raises(ModelLoadError, match="cannot load task 'fashion'"):
        engine.swap(corrupt)
    fewer = tmp_path / "fewer"
    shutil.copytree(v1.directory, fewer)
    manifest = json.loads((fewer / MANIFEST).read_text())
    del manifest["tasks"]["uci-digits"]
    (fewer / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="lacks task"):
        engine.swap(fewer)
    manifest["format_version"] = 99
    (fewer / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="format_version 99"):
        engine.swap(fewer)

    assert engine.version == 1 and engine.tasks == ("digits", "fashion", "uci-digits")
    np.testing.assert_array_equal(engine.infer("digits", images), before)


def test_engine_threads_must_be_positive(exported_pair: tuple[ExportedModel, ...]) -> None:
    with pytest.raises(InputError, match="threads"):
        InferenceEngine(exported_pair[0].directory, threads=0)


# ---------------------------------------------------------------------------- thread caps


def test_cap_threads_sets_torch_and_env_defaults_in_a_fresh_process() -> None:
    # A subprocess: torch's thread pools are per process and settable once.
    code = (
        "import os; os.environ.pop('OMP_NUM_THREADS', None); os.environ['MKL_NUM_THREADS'] = '3'\n"
        "from edge_client.threads import cap_threads\n"
        "first = cap_threads(2)\n"
        "import torch; torch.ones(64, 64) @ torch.ones(64, 64)\n"
        "second = cap_threads(1, inter_op=2)\n"
        "print(first.intra_op, first.inter_op, first.inter_op_capped, second.intra_op,"
        " second.inter_op_capped, os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["2", "1", "True", "1", "False", "2", "3"]


def test_a_thread_resize_keeps_serving_the_same_model_and_reuses_sessions_it_built(tmp_path: Path) -> None:
    export_onnx(build_model({"digits": 4}), tmp_path / "v1", version=1)
    engine = InferenceEngine(tmp_path / "v1", threads=1)
    images = np.zeros((2, 1, 28, 28), np.float32)
    before = engine.infer("digits", images)
    engine.set_threads(2)
    assert engine.threads == 2 and engine.version == 1
    np.testing.assert_allclose(engine.infer("digits", images), before, rtol=1e-5, atol=1e-6)
    one = engine._by_threads[1]
    engine.set_threads(1)
    assert engine._snapshot() is one  # the sessions built for one thread, not rebuilt


def test_a_swap_rebuilds_every_thread_count_off_the_lanes_so_a_later_resize_builds_nothing(
    tmp_path: Path,
) -> None:
    # Issue 15: after each new model version the split agent's next core move rebuilt its ORT
    # sessions on the serving lane (0.24 s on the 2-core VM, past a 150 ms SLO).
    export_onnx(build_model({"digits": 4}), tmp_path / "v1", version=1)
    engine = InferenceEngine(tmp_path / "v1", threads=1)
    engine.set_threads(2)
    engine.set_threads(1)
    export_onnx(build_model({"digits": 4}), tmp_path / "v2", version=2)
    engine.swap(tmp_path / "v2")
    assert engine.version == 2 and engine.threads == 1
    assert engine.prepared_threads == (1, 2)
    built = engine._by_threads[2]
    assert built.version == 2
    engine.set_threads(2)
    assert engine._snapshot() is built  # swapped in, not built on the lane
    images = np.zeros((2, 1, 28, 28), np.float32)
    assert engine.infer_with_version("digits", images)[1] == 2
