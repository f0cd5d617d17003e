"""The ONNX Runtime execution provider by name (`--ort-provider`): CPU by default; one this ONNX
Runtime lacks, or that a session drops, falls back to CPU with one warning, or is an error with
`--ort-strict`. This machine has the CPU build only, so CUDA and TensorRT are always missing
here: what runs on a GPU is docs/deployment.md's to say, not these tests'."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest

from dartfl.cli import edge_cmd
from dartfl.cli.main import main
from dartfl.errors import ConfigError
from edge_client import inference
from edge_client.agent_config import ORT_PROVIDER_NAMES, AgentConfig
from edge_client.inference import ORT_PROVIDERS, InferenceEngine, ProviderError

if TYPE_CHECKING:
    from tests.ml_fixtures import ExportedModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IMAGES = np.zeros((3, 1, 28, 28), np.float32)


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "--ort-provider" in r.getMessage()]


def test_the_provider_names_agree_everywhere() -> None:
    assert tuple(ORT_PROVIDERS) == ORT_PROVIDER_NAMES == edge_cmd.ORT_PROVIDER_NAMES
    assert all(chain[-1] == "CPUExecutionProvider" for chain in ORT_PROVIDERS.values())


def test_cpu_is_the_default_and_warns_about_nothing(
    exported_pair: tuple[ExportedModel, ...], caplog: pytest.LogCaptureFixture
) -> None:
    engine = InferenceEngine(exported_pair[0].directory)
    assert engine.provider == "CPUExecutionProvider"
    assert engine.infer("digits", IMAGES).shape == (3, 10)
    assert _fallbacks(caplog) == []


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_a_missing_provider_falls_back_to_cpu_with_one_warning_and_serves(
    exported_pair: tuple[ExportedModel, ...], caplog: pytest.LogCaptureFixture, provider: str
) -> None:
    wanted = ORT_PROVIDERS[provider][0]
    assert wanted not in ort.get_available_providers()  # the CPU build: see the module docstring
    caplog.set_level(logging.WARNING)
    engine = InferenceEngine(exported_pair[0].directory, provider=provider)
    cpu = InferenceEngine(exported_pair[0].directory)
    assert engine.provider == "CPUExecutionProvider"
    np.testing.assert_array_equal(engine.infer("fashion", IMAGES), cpu.infer("fashion", IMAGES))
    engine.swap(exported_pair[1].directory)  # later model versions do not warn again
    [warning] = _fallbacks(caplog)
    assert f"--ort-provider {provider}: this ONNX Runtime has no {wanted}" in warning
    assert "serving on CPU" in warning and "onnxruntime-gpu" in warning and "\n" not in warning


def test_a_missing_provider_asked_for_strictly_is_an_error_naming_the_fix(
    exported_pair: tuple[ExportedModel, ...],
) -> None:
    expected = r"--ort-provider cuda --ort-strict: .*no CUDAExecutionProvider"
    with pytest.raises(ProviderError, match=expected) as e:
        InferenceEngine(exported_pair[0].directory, provider="cuda", strict_provider=True)
    assert "onnxruntime-gpu" in str(e.value) and isinstance(e.value, ConfigError)


def test_a_provider_that_a_session_drops_is_a_fallback_too(
    exported_pair: tuple[ExportedModel, ...],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An onnxruntime-gpu whose CUDA libraries are missing lists CUDA but starts sessions on
    # CPU, saying so only in its own log. Played here by claiming CUDA is available.
    monkeypatch.setattr(
        inference.ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    caplog.set_level(logging.WARNING)
    engine = InferenceEngine(exported_pair[0].directory, provider="cuda")
    assert engine.provider == "CPUExecutionProvider"
    [warning] = _fallbacks(caplog)
    assert "did not start CUDAExecutionProvider (it runs on CPUExecutionProvider)" in warning
    with pytest.raises(ProviderError, match="did not start CUDAExecutionProvider"):
        InferenceEngine(exported_pair[0].directory, provider="cuda", strict_provider=True)


def test_an_unknown_provider_is_refused_with_the_valid_names(
    exported_pair: tuple[ExportedModel, ...],
) -> None:
    with pytest.raises(ConfigError, match="valid: cpu, cuda, tensorrt"):
        InferenceEngine(exported_pair[0].directory, provider="rocm")
    with pytest.raises(ConfigError, match="valid: cpu, cuda, tensorrt"):
        AgentConfig(ort_provider="rocm")


def test_edge_profile_strict_on_a_missing_provider_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.toml"
    args = ["edge", "profile", "--quick", "--max-train", "50", "-o", str(out), "--ort-provider", "cuda"]
    assert main([*args, "--ort-strict"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dartfl: error: --ort-provider cuda --ort-strict:")
    assert not out.exists()
