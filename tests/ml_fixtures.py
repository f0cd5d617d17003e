"""Fixtures for the tests of the ML task and the device: small real task data and exported models.

Everything expensive (dataset loads, ONNX exports) is session-scoped and read-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from edge_client.inference import export_onnx
from fltask.data import TaskData, load_tasks
from fltask.model import MultitaskCNN, build_model


@dataclass(frozen=True)
class ExportedModel:
    model: MultitaskCNN
    directory: Path
    version: int


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread for the test: tiny batches on busy shared CPUs otherwise
    spend most of their time in OpenMP barriers (10x slower when another process is busy)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def small_tasks() -> dict[str, TaskData]:
    """All three built-in tasks, 600 training and 300 test images each."""
    return load_tasks(max_train=600, max_test=300)


@pytest.fixture(scope="session")
def task_classes(small_tasks: dict[str, TaskData]) -> dict[str, int]:
    return {name: data.num_classes for name, data in small_tasks.items()}


@pytest.fixture(scope="session")
def exported_pair(
    tmp_path_factory: pytest.TempPathFactory, task_classes: dict[str, int]
) -> tuple[ExportedModel, ...]:
    """Two model versions (different weights) exported once for the whole session."""
    root = tmp_path_factory.mktemp("models")
    out = []
    for version in (1, 2):
        model = build_model(task_classes, width=1.0, seed=version)
        export_onnx(model, root / f"v{version}", version=version)
        out.append(ExportedModel(model, root / f"v{version}", version))
    return tuple(out)
