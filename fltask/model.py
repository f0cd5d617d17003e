"""The multitask model: a shared convolutional trunk with one linear head per task.

    x [b, 1, 28, 28]
      -> conv3x3(16w) -> ReLU -> maxpool2 -> conv3x3(32w) -> ReLU -> maxpool2   (trunk)
      -> flatten -> linear(64) -> ReLU                                        (trunk: embedding)
      -> heads[task]: linear(64 -> classes)                                   (one per task)

`width` w scales the channel counts: w = 1 is ~107k parameters (three 10-class tasks) and
~1.1M multiply-adds per image; w = 4 is ~478k parameters and ~15M multiply-adds, ~7-11x the
per-request time on an x86 core (benchmarks/onnx_vs_torch.py): a way to give a fast box
roughly the per-request cost of a Pi-class device.

There is no batch normalisation on purpose: a sample's gradient must not depend on which
microbatch it trained in (see fltask.trainer).

State-dict keys start with "trunk." or "heads.<task>." so a federated aggregator can weight
the shared trunk and each head differently.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from dartfl.errors import ConfigError, InputError

__all__ = ["EMBED_DIM", "MultitaskCNN", "build_model", "get_weights", "set_weights"]

EMBED_DIM = 64
_BASE_CHANNELS = (16, 32)


class MultitaskCNN(nn.Module):
    """Shared trunk + per-task heads; `forward(x, task)` returns that task's logits."""

    def __init__(self, task_classes: Mapping[str, int], width: float = 1.0) -> None:
        super().__init__()
        if not task_classes:
            raise ConfigError("a multitask model needs at least one task")
        for task, classes in task_classes.items():
            if not task or "." in task:
                raise ConfigError(f"task names must be non-empty and contain no '.', got {task!r}")
            if not (isinstance(classes, int) and classes >= 2):
                raise ConfigError(f"task {task!r} needs an integer number of classes >= 2, got {classes!r}")
        if not (isinstance(width, int | float) and 0 < width <= 64):
            raise ConfigError(f"model width must be a number in (0, 64], got {width!r}")
        c1, c2 = (max(1, round(c * width)) for c in _BASE_CHANNELS)
        self.width = float(width)
        self.task_classes: dict[str, int] = dict(task_classes)
        self.trunk = nn.Sequential(
            nn.Conv2d(1, c1, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(c2 * 7 * 7, EMBED_DIM),
            nn.ReLU(),
        )
        self.heads = nn.ModuleDict({t: nn.Linear(EMBED_DIM, k) for t, k in self.task_classes.items()})

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.task_classes)

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        if task not in self.task_classes:
            raise InputError(
                f"unknown task {task!r}; this model has heads for: {', '.join(self.task_classes)}"
            )
        logits: torch.Tensor = self.heads[task](self.trunk(x))
        return logits

    def trunk_parameters(self) -> list[str]:
        """State-dict names of the shared trunk's tensors."""
        return [name for name in self.state_dict() if name.startswith("trunk.")]

    def head_parameters(self, task: str) -> list[str]:
        """State-dict names of one task head's tensors."""
        if task not in self.task_classes:
            raise InputError(
                f"unknown task {task!r}; this model has heads for: {', '.join(self.task_classes)}"
            )
        return [name for name in self.state_dict() if name.startswith(f"heads.{task}.")]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(task_classes: Mapping[str, int], width: float = 1.0, seed: int = 0) -> MultitaskCNN:
    """A freshly initialised model; the same seed gives the same weights, the global RNG is untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MultitaskCNN(task_classes, width)


def get_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """A copy of every state-dict tensor as a float32 numpy array, keyed by state-dict name."""
    return {name: t.detach().cpu().numpy().copy() for name, t in model.state_dict().items()}


def set_weights(model: nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Load weights into the model; keys and shapes must match exactly (nothing is loaded otherwise)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise InputError(
            "weights do not fit this model: "
            f"missing {missing or 'none'}, unexpected {unexpected or 'none'} "
            "(was the model built with the same tasks?)"
        )
    tensors = {}
    for name, ref in expected.items():
        value = np.asarray(weights[name])
        if value.shape != tuple(ref.shape):
            raise InputError(
                f"weight {name!r} has shape {value.shape}, this model expects {tuple(ref.shape)} "
                "(was the model built with the same width?)"
            )
        if not np.isfinite(value).all():
            raise InputError(f"weight {name!r} holds NaN or infinite values")
        tensors[name] = torch.tensor(value, dtype=ref.dtype)
    model.load_state_dict(tensors, strict=True)
