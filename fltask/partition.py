"""Client partitions of a task's training set: IID, Dirichlet label skew, and one client's view."""

from __future__ import annotations

import numpy as np

from dartfl.errors import ConfigError, InputError
from fltask.data import TaskData

__all__ = ["client_view", "partition_dirichlet", "partition_iid"]


def partition_iid(num_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle, then cut into num_clients parts whose sizes differ by at most one (sorted indices)."""
    if not (isinstance(num_clients, int) and 1 <= num_clients <= num_samples):
        raise ConfigError(f"num_clients must be an integer in [1, {num_samples}], got {num_clients!r}")
    return [np.sort(part) for part in np.array_split(rng.permutation(num_samples), num_clients)]


def partition_dirichlet(
    labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator, min_size: int = 10
) -> list[np.ndarray]:
    """Label-skewed non-IID split: each class is spread over clients by Dirichlet(alpha) shares.

    Small alpha gives each client few classes; large alpha approaches IID. Clients left with
    fewer than `min_size` samples take random samples from the largest clients, so every
    client can train (the skew of the others barely changes).
    """
    labels = np.asarray(labels)
    n = len(labels)
    if not (isinstance(num_clients, int) and num_clients >= 1):
        raise ConfigError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if not (isinstance(alpha, int | float) and np.isfinite(alpha) and alpha > 0):
        raise ConfigError(f"Dirichlet alpha must be a finite number > 0, got {alpha!r}")
    if not (isinstance(min_size, int) and min_size >= 0) or num_clients * min_size > n:
        raise ConfigError(f"cannot give {num_clients} clients {min_size} samples each from {n} samples")
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, float(alpha)))) * len(idx)).astype(int)[:-1]
        for client, chunk in enumerate(np.split(idx, cuts)):
            parts[client].extend(chunk.tolist())
    for client in range(num_clients):
        while len(parts[client]) < min_size:
            donor = max(range(num_clients), key=lambda k: len(parts[k]))
            parts[client].append(parts[donor].pop(int(rng.integers(len(parts[donor])))))
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def client_view(task_data: TaskData, indices: np.ndarray) -> TaskData:
    """The task as one client sees it: the given training samples, the full test set."""
    idx = np.asarray(indices)
    if idx.ndim != 1 or len(idx) == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise InputError(f"client indices must be a non-empty 1-D integer array, got {idx.dtype} {idx.shape}")
    if idx.min() < 0 or idx.max() >= task_data.num_train:
        raise InputError(f"client indices must lie in [0, {task_data.num_train}) for task {task_data.name!r}")
    return TaskData(
        name=task_data.name,
        x_train=task_data.x_train[idx],
        y_train=task_data.y_train[idx],
        x_test=task_data.x_test,
        y_test=task_data.y_test,
        num_classes=task_data.num_classes,
    )
