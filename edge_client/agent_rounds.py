"""One federated round on the device agent: what the round channel hands over, how it is
checked, and the metrics the update carries back to the server.

The agent's executor thread does the work (`Agent._begin_round` / `_end_round`); this module
holds the data and the arithmetic, so both read without the executor around them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.errors import ConfigError, DartflError

__all__ = ["RoundJob", "RoundSlot", "round_job_from_meta", "round_metrics"]


@dataclass
class RoundJob:
    """One federated round handed over the round channel (see `Agent._handle_round`)."""

    meta: dict[str, Any]
    weights: dict[str, np.ndarray]
    duration_s: float
    target: int
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[dict[str, Any], dict[str, np.ndarray]] | None = None
    error: BaseException | None = None
    received_s: float = field(default_factory=time.monotonic)
    started_s: float = 0.0
    install_s: float = 0.0
    trained_before: list[int] = field(default_factory=list)
    training_busy_before: float = 0.0
    inference_busy_before: float = 0.0
    arrivals: list[int] = field(default_factory=list)
    answered: int = 0
    met: int = 0
    learning_rate: float | None = None  # the round's learning rate (None: keep the agent's)
    step_samples: int | None = None  # samples per optimizer step (None: keep the agent's)
    ce_before: list[float] = field(default_factory=list)


class RoundSlot:
    """At most one round at a time, handed from the round channel's thread to the executor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending: RoundJob | None = None  # handed over, not yet started by the executor
        self.active: RoundJob | None = None  # the executor trains for it

    def run(self, job: RoundJob, stopping: threading.Event) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Channel thread: queue `job` for the executor and wait for its update."""
        with self._lock:
            if stopping.is_set():
                raise ConfigError("the device agent is shutting down")
            if self.pending is not None or self.active is not None:
                raise ConfigError("a round is already running on this device")
            self.pending = job
        if not job.done.wait(job.duration_s + 120.0):
            raise DartflError(f"the round did not finish within {job.duration_s + 120.0:.0f} s")
        if job.error is not None:
            raise job.error
        if job.result is None:
            raise DartflError("the round ended without an update")
        return job.result

    def begin(self) -> RoundJob | None:
        """Executor: take the pending round (None if there is none); it is now active."""
        with self._lock:
            job, self.pending = self.pending, None
            if job is not None:
                self.active = job
            return job

    def end(self, job: RoundJob, *, error: BaseException | None = None) -> None:
        """Executor: the active round is over (its result set, or failed with `error`)."""
        if error is not None:
            job.error = error
        with self._lock:
            self.active = None
        job.done.set()

    def cancel(self, reason: str) -> None:
        """Fail the pending and the active round with `reason` (shutdown)."""
        with self._lock:
            for job in (self.pending, self.active):
                if job is not None and not job.done.is_set():
                    job.error = ConfigError(reason)
                    job.done.set()
            self.pending = self.active = None


def round_job_from_meta(
    meta: Mapping[str, Any],
    weights: dict[str, np.ndarray],
    default_round_s: float,
    tasks: Sequence[str],
    policy: str | None = None,
    loss_weighting: str | None = None,
) -> RoundJob:
    """A round from the ClientApp's metadata; ConfigError if it is unusable on this agent.

    A run whose policy or loss weighting differs from the agent's `policy` and
    `loss_weighting` is refused: the agent trains and serves under its own, and the server
    would file the results under the run's."""
    try:
        duration = float(meta.get("round-deadline-s", default_round_s))
        target = int(meta.get("round-target-samples", 0))
    except (TypeError, ValueError):
        raise ConfigError(f"bad round metadata: {dict(meta)}") from None
    if not (math.isfinite(duration) and duration > 0):
        raise ConfigError(f"round-deadline-s must be > 0, got {duration}")
    run_tasks = meta.get("tasks")
    if run_tasks is not None and list(run_tasks) != list(tasks):
        raise ConfigError(f"the run's tasks {run_tasks} differ from this agent's {list(tasks)}")
    ours_and_flags = (("policy", policy, "--policy"), ("loss-weighting", loss_weighting, "--loss-weights"))
    for key, ours, flag in ours_and_flags:
        theirs = meta.get(key)
        if ours is not None and theirs is not None and str(theirs).strip() != ours.strip():
            raise ConfigError(
                f"the run's {key} {theirs!r} differs from this agent's {ours!r}; "
                f"start the agent with {flag} {theirs}"
            )
    lr = meta.get("learning-rate")
    if lr is not None and not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
        raise ConfigError(f"learning-rate must be a number > 0, got {lr!r}")
    step = meta.get("step-samples")
    if step is not None and not (isinstance(step, int) and not isinstance(step, bool) and step >= 1):
        raise ConfigError(f"step-samples must be an integer >= 1, got {step!r}")
    return RoundJob(
        dict(meta),
        weights,
        duration,
        target,
        learning_rate=None if lr is None else float(lr),
        step_samples=step,
    )


def round_metrics(
    job: RoundJob,
    *,
    now_s: float,
    samples: Mapping[str, int],
    training_busy_s: float,
    inference_busy_s: float,
    modelled_per_sample_s: float,
    model_version: int,
    tasks: Sequence[str],
    ce_sums: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The update's metrics: samples, requests and SLO met in the round, harvest, busy times."""
    wall = now_s - job.started_s
    # Harvest: the share of the time inference left idle that training used, in samples
    # (at the round's own measured training throughput; the cost model before any step).
    trained = sum(samples.values())
    per_sample = training_busy_s / trained if trained and training_busy_s > 0 else modelled_per_sample_s
    requests = sum(job.arrivals)
    metrics: dict[str, float] = {
        "num-examples": float(trained),
        "requests": float(requests),
        "slo-met": float(min(job.met, requests)),
        "fluid-trainable": max(0.0, wall - inference_busy_s) / per_sample if per_sample > 0 else 0.0,
        "train-wall-s": training_busy_s,
        "inference-busy-s": inference_busy_s,
        "client-wall-s": now_s - job.received_s,
        "agent-round-s": wall,
        "install-s": job.install_s,
        "answered": float(job.answered),
        "slo-attainment": job.met / requests if requests else 1.0,
        "model-version": float(model_version),
    }
    for k, t in enumerate(tasks):
        metrics[f"requests-{t}"] = float(job.arrivals[k])
        if ce_sums is not None:
            metrics[f"ce-sum-{t}"] = float(ce_sums[t])
    return metrics
