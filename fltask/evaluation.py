"""Server-side evaluation: per-task accuracy of the global model on held-out test sets."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fltask.config import FlConfig
from fltask.data import TaskData, load_tasks
from fltask.model import MultitaskCNN, build_model, set_weights
from fltask.trainer import evaluate

__all__ = ["Evaluator", "demand_weighted"]


def demand_weighted(accuracy: Mapping[str, float], demand: Mapping[str, float]) -> float:
    """sum_k lambda_k acc_k / sum_k lambda_k (the plain mean when there is no demand)."""
    total = sum(demand.get(t, 0.0) for t in accuracy)
    if total <= 0:
        return float(np.mean(list(accuracy.values())))
    return sum(acc * demand.get(t, 0.0) for t, acc in accuracy.items()) / total


class Evaluator:
    """Holds the test sets and a model to load global weights into."""

    def __init__(self, cfg: FlConfig) -> None:
        self.tasks: dict[str, TaskData] = load_tasks(
            cfg.task_names, max_train=cfg.max_train_per_task, max_test=cfg.max_test_per_task, seed=cfg.seed
        )
        self.model: MultitaskCNN = build_model(
            {n: d.num_classes for n, d in self.tasks.items()}, cfg.model_width, seed=cfg.seed
        )

    def initial_weights(self) -> dict[str, np.ndarray]:
        from fltask.model import get_weights

        return get_weights(self.model)

    def accuracy(self, weights: Mapping[str, np.ndarray]) -> dict[str, float]:
        set_weights(self.model, weights)
        return evaluate(self.model, self.tasks)
