"""Federated rounds on the device agent: what the round channel hands over, how it is checked,
how the executor thread runs it (`FederatedRounds`), and the metrics the update carries back.

A round reaches the agent on the round channel's thread (`FederatedRounds.handle`), waits in a
`RoundSlot`, and is begun and ended by the executor thread: it installs the global weights,
opens the round in the device executor (which then trains under the allocator), and at the
deadline flushes the last step and hands back the weights with per-task counts and metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dartfl.errors import ConfigError, DartflError
from dartfl.executor import DeviceExecutor
from edge_client.agent_config import AgentConfig
from edge_client.agent_report import Counters
from edge_client.round_messages import RoundOrder, RoundResult

if TYPE_CHECKING:
    from edge_client.round_channel import RoundChannelServer, WeightSpec
    from edge_client.runtime import ModelRuntime

log = logging.getLogger(__name__)

__all__ = ["FederatedRounds", "RoundJob", "RoundSlot", "round_job", "round_metrics"]


@dataclass
class RoundJob:
    """One federated round handed over the round channel (see `FederatedRounds.handle`)."""

    order: RoundOrder
    weights: dict[str, np.ndarray]
    duration_s: float  # the order's deadline, or the agent's round length
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[RoundResult, dict[str, np.ndarray]] | None = None
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
    ce_before: list[float] = field(default_factory=list)


class RoundSlot:
    """At most one round at a time, handed from the round channel's thread to the executor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending: RoundJob | None = None  # handed over, not yet started by the executor
        self.active: RoundJob | None = None  # the executor trains for it

    def run(self, job: RoundJob, stopping: threading.Event) -> tuple[RoundResult, dict[str, np.ndarray]]:
        """Channel thread: queue `job` for the executor and wait for its update."""
        with self._lock:
            if stopping.is_set():
                raise ConfigError("the device agent is shutting down")
            if self.pending is not None or self.active is not None:
                raise ConfigError("a round is already running on this device")
            self.pending = job
        if not job.done.wait(job.duration_s + 120.0):
            raise DartflError(f"the round did not finish within {job.duration_s + 120.0:.0f} s")
        # Take the outcome out of the job: a job that held its own raised error would hold,
        # through the error's traceback, this frame and so the job (a cycle that keeps the
        # round's arrays until the garbage collector runs).
        error, result = job.error, job.result
        job.error, job.result, job.weights = None, None, {}
        del job
        if error is not None:
            try:
                raise error
            finally:
                del error  # the raised error's traceback holds this frame: break that loop too
        if result is None:
            raise DartflError("the round ended without an update")
        return result

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


def round_job(
    order: RoundOrder,
    weights: dict[str, np.ndarray],
    default_round_s: float,
    tasks: Sequence[str],
    policy: str | None = None,
    loss_weighting: str | None = None,
) -> RoundJob:
    """The round `order` asks for on this agent; ConfigError if the agent cannot run it.

    A run whose tasks, policy or loss weighting differ from the agent's `tasks`, `policy` and
    `loss_weighting` is refused: the agent trains and serves under its own, and the server
    would file the results under the run's."""
    if order.tasks is not None and list(order.tasks) != list(tasks):
        raise ConfigError(f"the run's tasks {list(order.tasks)} differ from this agent's {list(tasks)}")
    ours_and_flags = (
        ("policy", order.policy, policy, "--policy"),
        ("loss-weighting", order.loss_weighting, loss_weighting, "--loss-weights"),
    )
    for key, theirs, ours, flag in ours_and_flags:
        if ours is not None and theirs is not None and theirs.strip() != ours.strip():
            raise ConfigError(
                f"the run's {key} {theirs!r} differs from this agent's {ours!r}; "
                f"start the agent with {flag} {theirs}"
            )
    duration = default_round_s if order.deadline_s is None else order.deadline_s
    return RoundJob(order, weights, duration)


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


Weights = dict[str, np.ndarray]


class FederatedRounds:
    """The agent's federated side: rounds from the round channel, run by the executor thread.

    `lock` is the agent's, which serialises the device executor; `tick(now)` plans a control
    period at once (a new round is planned as it opens)."""

    def __init__(
        self,
        config: AgentConfig,
        runtime: ModelRuntime,
        device: DeviceExecutor[Any],
        lock: threading.Condition,
        counters: Counters,
        tick: Callable[[float], None],
    ) -> None:
        self.config, self.runtime, self.device, self.lock = config, runtime, device, lock
        self.counters, self.tick = counters, tick
        self.slot = RoundSlot()
        self.channel: RoundChannelServer | None = None  # once `open_channel` serves one
        self.spec: WeightSpec | None = None  # the model's weights, which a round must bring

    def open_channel(self, address: str, stopping: threading.Event) -> str:
        """Serve the round channel on `address` (127.0.0.1:PORT) until `close`; where it serves."""
        from edge_client.round_channel import RoundChannelServer, WeightSpec

        self.spec = WeightSpec.like(self.runtime.model.state_dict())
        server = RoundChannelServer(address, lambda m, w: self.handle(m, w, stopping), self.health, self.spec)
        address = server.start()
        self.channel = server  # only a serving one: stop() would wait forever on another
        return address

    def close(self, reason: str) -> None:
        """Stop the round channel; a round pending or running fails with `reason`."""
        if self.channel is not None:
            self.channel.stop()
        self.slot.cancel(reason)

    @property
    def active(self) -> RoundJob | None:
        return self.slot.active

    def health(self) -> dict[str, Any]:
        return {
            "device": self.config.device_id,
            "tasks": list(self.config.tasks),
            "policy": self.device.policy.name,
            "in_round": self.slot.active is not None,
        }

    def handle(
        self, order: RoundOrder, weights: Weights, stopping: threading.Event
    ) -> tuple[RoundResult, Weights]:
        """The round channel's handler thread: queue the round for the executor and wait for it."""
        cfg = self.config
        job = round_job(
            order, weights, cfg.round_s, cfg.tasks, policy=cfg.policy, loss_weighting=cfg.weighting
        )
        # The channel read only weights of the model; all of them must be there (checked
        # after the order, so that a bad order is named first).
        missing = [] if self.spec is None else self.spec.missing(weights)
        if missing:
            raise ConfigError(
                f"cannot install the round's weights: {len(missing)} of the model's are missing, "
                f"such as {missing[0]!r}"
            )
        return self.slot.run(job, stopping)

    def step(self, now_s: float) -> None:
        """Executor thread, every loop: begin a pending round, end the active one at its deadline."""
        if self.slot.pending is not None:
            self._begin()
        job = self.slot.active
        if job is not None and now_s >= job.started_s + job.duration_s:
            self._end(job)

    def due(self, now_s: float) -> bool:
        """`step` has work now: a round to begin, or the active one past its deadline."""
        job = self.slot.active
        return self.slot.pending is not None or (job is not None and now_s >= job.started_s + job.duration_s)

    def count_arrivals(self, arrivals: Sequence[int]) -> None:
        """A control period's arrivals, for the active round's request count (under the lock)."""
        if (job := self.slot.active) is not None:
            for k, n in enumerate(arrivals):
                job.arrivals[k] += n

    def _begin(self) -> None:
        """Install the round's global weights and open its training window."""
        job = self.slot.begin()
        if job is None:
            return
        weights, job.weights = job.weights, {}  # installed once: the round keeps no copy
        t0 = time.monotonic()
        try:
            self.runtime.start_round(weights, job.order.learning_rate, job.order.step_samples)
        except DartflError as exc:  # weights that do not fit (NaN, a shape): bad input
            # The channel logs the one line as it answers 400; no traceback is kept.
            log.debug("round %s refused: %s", job.order.server_round, str(exc))
            self.slot.end(job, error=ConfigError(f"could not install the global weights: {exc}"))
            return
        except Exception as exc:  # a fault of ours: fail the round, keep serving
            log.exception("could not install the round's weights")
            self.slot.end(job, error=ConfigError(f"could not install the global weights: {exc}"))
            return
        finally:
            del weights
        now = time.monotonic()
        device = self.device
        with self.lock:
            job.install_s, job.started_s = now - t0, now
            job.trained_before = list(device.trained_per_task)
            job.training_busy_before = device.training_busy_s
            job.inference_busy_before = device.inference_busy_s
            device.rounds.begin(now, job.duration_s, job.order.target_samples)
            device.training_enabled = True
        job.ce_before = list(self.counters.ce_sum_per_task)
        job.arrivals = [0] * len(self.config.tasks)
        self.tick(now)  # plan the new round at once

    def _end(self, job: RoundJob) -> None:
        """Close the round, flush the last step, hand back the update."""
        tasks, device = self.config.tasks, self.device
        t0 = time.monotonic()
        weights = self.runtime.finish_round()
        now = time.monotonic()
        with self.lock:
            device.training_busy_s += now - t0  # the flush's optimizer step is training time
            device.rounds.end()
            device.training_enabled = False  # serve only until the next round
            samples = {t: device.trained_per_task[k] - job.trained_before[k] for k, t in enumerate(tasks)}
            training_busy_s = device.training_busy_s - job.training_busy_before
            inference_busy_s = device.inference_busy_s - job.inference_busy_before
            costs = device.costs
            m = max(1, device.profile.training.max_microbatch)
            modelled_per_sample_s = (costs.microbatch_fixed_s + costs.per_sample_s * m) / m
        ce = self.counters.ce_sum_per_task
        metrics = round_metrics(
            job,
            now_s=now,
            samples=samples,
            training_busy_s=training_busy_s,
            inference_busy_s=inference_busy_s,
            modelled_per_sample_s=modelled_per_sample_s,
            model_version=self.runtime.version,
            tasks=tasks,
            ce_sums={t: ce[k] - job.ce_before[k] for k, t in enumerate(tasks)},
        )
        job.result = (RoundResult(self.config.device_id, samples, metrics), weights)
        self.slot.end(job)
        log.info("round %s done: %s", job.order.server_round, metrics)
