"""Model versions that survive a restart: the newest complete one is served and trained on,
half-written exports are swept, a damaged newest one falls back to the one before."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError
from edge_client.agent_config import AgentConfig
from edge_client.inference import MANIFEST, WEIGHTS, InferenceEngine, export_onnx
from edge_client.model_versions import ModelVersions, read_weights
from edge_client.runtime import ModelRuntime
from fltask.model import MultitaskCNN, build_model, get_weights, set_weights

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TASKS = {"a": 4, "b": 3}


def _export(root: Path, version: int, seed: int | None = None) -> MultitaskCNN:
    model = build_model(TASKS, seed=version if seed is None else seed)
    export_onnx(model, root / f"v{version}", version=version)
    return model


def _loader(model: MultitaskCNN) -> Callable[[Path, dict[str, np.ndarray]], int]:
    """What the runtime does with a version: an engine on it, its weights into the model."""

    def load(directory: Path, weights: dict[str, np.ndarray]) -> int:
        engine = InferenceEngine(directory)
        set_weights(model, weights)
        return engine.version

    return load


def _same_weights(model: MultitaskCNN, other: MultitaskCNN) -> bool:
    mine, theirs = get_weights(model), get_weights(other)
    return all(np.array_equal(mine[name], theirs[name]) for name in mine)


def test_an_export_carries_its_pytorch_weights_and_every_files_checksum(tmp_path: Path) -> None:
    model = _export(tmp_path, 1)
    manifest = json.loads((tmp_path / "v1" / MANIFEST).read_text())
    assert manifest["weights"] == WEIGHTS
    assert set(manifest["sha256"]) == {"a.onnx", "b.onnx", WEIGHTS}
    restored = build_model(TASKS, seed=99)
    set_weights(restored, read_weights(tmp_path / "v1", 1))
    assert _same_weights(restored, model)


def test_the_newest_complete_version_is_served_and_its_weights_resume_training(tmp_path: Path) -> None:
    _export(tmp_path, 1)
    newest = _export(tmp_path, 2)
    model = build_model(TASKS, seed=0)
    recovered = ModelVersions(tmp_path).recover(_loader(model))
    assert recovered is not None and (recovered.version, recovered.loaded) == (2, 2)
    assert _same_weights(model, newest)
    assert ModelVersions(tmp_path).next_version() == 3


def test_half_written_exports_are_swept_and_never_served(tmp_path: Path) -> None:
    _export(tmp_path, 1)
    # What a kill in the middle of exporting v2 leaves: export_onnx's hidden temp folder.
    partial = tmp_path / ".v2.k3j9x"
    partial.mkdir()
    (partial / "a.onnx").write_bytes(b"half a model")
    aside = tmp_path / ".v1.old.q8z"  # an overwrite's aside, killed before its removal
    aside.mkdir()
    recovered = ModelVersions(tmp_path).recover(_loader(build_model(TASKS)))
    assert recovered is not None and recovered.version == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]


def _truncate_onnx(directory: Path) -> None:
    path = directory / "b.onnx"
    path.write_bytes(path.read_bytes()[:100])


def _flip_a_weight_byte(directory: Path) -> None:
    path = directory / WEIGHTS
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _garble_manifest(directory: Path) -> None:
    (directory / MANIFEST).write_text("{not json")


def _drop_the_weights(directory: Path) -> None:
    (directory / WEIGHTS).unlink()


def _forget_the_weights(directory: Path) -> None:  # an export from before versions resumed
    manifest = json.loads((directory / MANIFEST).read_text())
    del manifest["weights"], manifest["sha256"]
    (directory / MANIFEST).write_text(json.dumps(manifest))


def _nan_weights(directory: Path) -> None:  # a diverged model, exported intact
    model = build_model(TASKS)
    with np.errstate(invalid="ignore"):
        for p in model.parameters():
            p.data.fill_(float("nan"))
    export_onnx(model, directory, version=2, overwrite=True)


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_truncate_onnx, "b.onnx does not match its checksum"),
        (_flip_a_weight_byte, f"{WEIGHTS} does not match its checksum"),
        (_garble_manifest, "unreadable manifest"),
        (_drop_the_weights, f"{WEIGHTS} is missing"),
        (_forget_the_weights, "no PyTorch weights"),
        (_nan_weights, "NaN or infinite"),
    ],
)
def test_a_damaged_newest_version_falls_back_to_the_one_before_with_a_one_line_warning(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
    problem: str,
) -> None:
    before = _export(tmp_path, 1)
    _export(tmp_path, 2)
    damage(tmp_path / "v2")
    model = build_model(TASKS, seed=0)
    with caplog.at_level(logging.WARNING, logger="edge_client.model_versions"):
        recovered = ModelVersions(tmp_path).recover(_loader(model))
    assert recovered is not None and recovered.version == 1
    assert _same_weights(model, before)
    (warning, summary) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "model version v2" in warning and problem in warning and "\n" not in warning
    assert "set aside as v2.damaged" in warning and "serving model version v1" in summary
    assert (tmp_path / "v2.damaged").is_dir() and not (tmp_path / "v2").exists()
    assert ModelVersions(tmp_path).next_version() == 3  # v2 never names another model


def test_an_onnx_file_that_does_not_load_falls_back_too(tmp_path: Path) -> None:
    # Intact by its checksum (rewritten with a matching one) yet unservable: ONNX Runtime says so.
    _export(tmp_path, 1)
    _export(tmp_path, 2)
    directory = tmp_path / "v2"
    (directory / "a.onnx").write_bytes(b"\x08\x01 not a model")
    manifest = json.loads((directory / MANIFEST).read_text())
    from edge_client.inference import file_sha256

    manifest["sha256"]["a.onnx"] = file_sha256(directory / "a.onnx")
    (directory / MANIFEST).write_text(json.dumps(manifest))
    recovered = ModelVersions(tmp_path).recover(_loader(build_model(TASKS)))
    assert recovered is not None and recovered.version == 1


def test_no_intact_version_means_none_and_every_one_is_set_aside(tmp_path: Path) -> None:
    for version in (1, 2):
        _export(tmp_path, version)
        _garble_manifest(tmp_path / f"v{version}")
    versions = ModelVersions(tmp_path)
    assert versions.recover(_loader(build_model(TASKS))) is None
    assert versions.versions() == [] and versions.next_version() == 3


def test_prune_keeps_the_serving_version_and_its_fallback(tmp_path: Path) -> None:
    for version in (1, 2, 3, 4):
        _export(tmp_path, version)
    (tmp_path / "v2").rename(tmp_path / "v2.damaged")
    (tmp_path / "v5.damaged").mkdir()  # newer than what is kept: still worth a look
    ModelVersions(tmp_path).prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v3", "v4", "v5.damaged"]


# ---------------------------------------------------------------------------- the runtime


def _config(model_dir: Path, **overrides: object) -> AgentConfig:
    return AgentConfig(
        tasks=("digits", "uci-digits"), max_train_per_task=100, model_dir=model_dir, **overrides
    )  # type: ignore[arg-type]


def test_a_restarted_runtime_serves_and_trains_the_model_it_published(tmp_path: Path) -> None:
    # It deleted every version at start and served fresh weights (accuracy 0.37 against 0.91).
    first = ModelRuntime.build(_config(tmp_path), tmp_path)
    try:
        assert first.version == 1
        for _ in range(3):
            first.train(16, [0.5, 0.5], [1.0, 1.0])
        first.trainer.flush()
        assert first.publish_model() == 2
        images = np.random.default_rng(0).random((16, 1, 28, 28), dtype=np.float32)
        served = first.engine.infer("digits", images)
        trained = get_weights(first.model)
    finally:
        first.close()
    again = ModelRuntime.build(_config(tmp_path), tmp_path)
    try:
        assert again.version == 2
        np.testing.assert_array_equal(again.engine.infer("digits", images), served)
        restored = get_weights(again.model)
        assert all(np.array_equal(restored[k], trained[k]) for k in trained)
        assert again.publish_model() == 3  # numbering goes on; v2 stays as the fallback
        assert sorted(p.name for p in tmp_path.iterdir()) == ["v2", "v3"]
    finally:
        again.close()


def test_a_model_dir_of_another_model_is_refused_in_one_line_and_left_alone(tmp_path: Path) -> None:
    ModelRuntime.build(_config(tmp_path), tmp_path).close()
    with pytest.raises(ConfigError, match=r"--tasks and --width it was trained with") as caught:
        ModelRuntime.build(_config(tmp_path, width=2.0), tmp_path)
    assert "\n" not in str(caught.value) and f"--model-dir {tmp_path}" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]  # nothing set aside
