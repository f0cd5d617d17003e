"""Multitask-aware federated averaging.

The model's state-dict keys say which part a tensor belongs to (fltask.model):
- "trunk.*", shared by every task: averaged over clients weighted by ALL samples each trained;
- "heads.<task>.*", one task's head: weighted by the samples each client trained ON THAT TASK,
  so a client that trained no sample of a task (its head only drifted through nothing, or
  through weight decay) does not drag the head back towards the old global one;
- anything else is treated like the trunk.
A part that no client trained at all keeps the current global weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dartfl.errors import InputError

__all__ = ["ClientUpdate", "aggregate", "check_weights", "part_of"]


@dataclass(frozen=True)
class ClientUpdate:
    """One client's trained weights and how many samples of each task it trained."""

    weights: Mapping[str, np.ndarray]
    samples_per_task: Mapping[str, int]

    def __post_init__(self) -> None:
        for task, n in self.samples_per_task.items():
            if not (isinstance(n, int | np.integer) and n >= 0):
                raise InputError(f"samples of task {task!r} must be an integer >= 0, got {n!r}")

    @property
    def total_samples(self) -> int:
        return int(sum(self.samples_per_task.values()))


def part_of(key: str) -> str | None:
    """The task whose head holds `key`, or None for shared (trunk) tensors."""
    if key.startswith("heads."):
        return key.split(".", 2)[1]
    return None


def check_weights(reference: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]) -> None:
    """InputError unless `weights` has exactly the tensors of `reference`, of the same shapes,
    all finite. One diverged or malformed update must not poison the global model."""
    if set(weights) != set(reference):
        missing = sorted(set(reference) - set(weights))
        extra = sorted(set(weights) - set(reference))
        raise InputError(f"the weights do not fit the model: missing {missing[:5]}, unexpected {extra[:5]}")
    for key, ref in reference.items():
        value = np.asarray(weights[key])
        if value.shape != np.shape(ref):
            raise InputError(f"weight {key!r}: shape {value.shape}, expected {np.shape(ref)}")
        if not np.issubdtype(value.dtype, np.number) or not np.isfinite(value).all():
            raise InputError(f"weight {key!r} holds NaN, infinity or non-numbers (a diverged update?)")


def aggregate(
    global_weights: Mapping[str, np.ndarray], updates: Sequence[ClientUpdate]
) -> dict[str, np.ndarray]:
    """The new global weights: per-part sample-weighted means of the clients' weights."""
    for i, u in enumerate(updates):
        try:
            check_weights(global_weights, u.weights)
        except InputError as exc:
            raise InputError(f"update {i}: {exc}") from None
    totals = np.asarray([u.total_samples for u in updates], dtype=np.float64)
    out: dict[str, np.ndarray] = {}
    for key, current in global_weights.items():
        task = part_of(key)
        if task is None:
            w = totals
        else:
            w = np.asarray([u.samples_per_task.get(task, 0) for u in updates], dtype=np.float64)
        if w.sum() <= 0:
            out[key] = np.array(current, copy=True)
            continue
        acc = np.zeros(np.shape(current), dtype=np.float64)
        for weight, u in zip(w, updates, strict=True):
            if weight > 0:
                acc += weight * np.asarray(u.weights[key])
        out[key] = (acc / w.sum()).astype(np.asarray(current).dtype)
    return out
