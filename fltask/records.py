"""Conversions between the core's plain values and Flower's records, one function per direction.

Weights travel as an ArrayRecord keyed by state-dict name (so the server can tell trunk from
heads); per-task sample counts travel in the MetricRecord as "samples-<task>".
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord

from dartfl.errors import ProtocolError

__all__ = [
    "SAMPLES_PREFIX",
    "arrays_to_weights",
    "metrics_to_record",
    "record_to_metrics",
    "samples_from_metrics",
    "weights_to_arrays",
]

SAMPLES_PREFIX = "samples-"


def weights_to_arrays(weights: Mapping[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({name: Array(np.ascontiguousarray(value)) for name, value in weights.items()})


def arrays_to_weights(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: array.numpy() for name, array in record.items()}


def metrics_to_record(metrics: Mapping[str, float], samples_per_task: Mapping[str, int]) -> MetricRecord:
    values: dict[str, int | float] = {k: float(v) for k, v in metrics.items()}
    for task, n in samples_per_task.items():
        values[SAMPLES_PREFIX + task] = int(n)
    return MetricRecord(values)  # type: ignore[arg-type]


def record_to_metrics(record: MetricRecord) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, int | float)}


def samples_from_metrics(metrics: Mapping[str, float], tasks: tuple[str, ...]) -> dict[str, int]:
    """Per-task sample counts of a reply; a reply without them, or with a count that is not a
    whole number >= 0, is a protocol error."""
    missing = [t for t in tasks if SAMPLES_PREFIX + t not in metrics]
    if missing:
        raise ProtocolError("bad-reply", f"client reply lacks sample counts for task(s) {', '.join(missing)}")
    counts = {}
    for t in tasks:
        n = metrics[SAMPLES_PREFIX + t]
        if not (isinstance(n, int | float) and math.isfinite(n) and n >= 0 and n == int(n)):
            raise ProtocolError("bad-reply", f"client reply's sample count for task {t!r} is {n!r}")
        counts[t] = int(n)
    return counts
