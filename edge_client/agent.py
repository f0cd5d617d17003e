"""The device agent: one long-lived process per device that co-schedules inference and training.

Threads:
- paho's network thread runs `_on_message`: decode, then queue the request or answer at
  once with an error or rejection reply. It never blocks on the model, so a slow model
  cannot stall ingress, and a full queue rejects instead of growing;
- the executor thread (`run`) is the device: every control period it observes and asks
  the allocator for an Allocation, and between periods it runs inference batches (ONNX
  Runtime) and training microbatches (PyTorch) one at a time, chosen by the same rule as
  the simulator (`dartfl.executor`);
- a telemetry thread publishes a snapshot at a fixed rate (QoS 1).
SIGTERM (via `request_stop`) stops training, drains the queue for up to `drain_s`, rejects
what is left with `shutting-down`, reports the totals and disconnects.

Federated deployment: with `round_channel` (or $DARTFL_ROUND_CHANNEL) set to 127.0.0.1:PORT
the agent also serves the round channel (edge_client.round_channel). A Flower ClientApp hands
it a round there: the executor installs the global weights (dropping accumulated gradients
and optimizer momentum, hot-swapping serving to them), trains under the allocator until the
round's deadline, flushes, and returns the weights with per-task sample counts and metrics.
Between rounds such an agent only serves (training then would be thrown away).
Its parts: agent_config, agent_link (MQTT), agent_ingress, agent_rounds, agent_report.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.errors import ConfigError
from dartfl.estimators import EwmaRates, ServiceTimeProfiler
from dartfl.executor import ShareGate, most_urgent
from dartfl.policies import make_policy
from dartfl.types import Allocation, DeviceProfile, Observation
from edge_client import protocol
from edge_client.agent_config import AgentConfig
from edge_client.agent_ingress import admit_request
from edge_client.agent_report import Counters, build_report, profile_dict
from edge_client.agent_rounds import RoundJob, RoundSlot, round_job_from_meta, round_metrics
from edge_client.queues import RequestQueues
from edge_client.telemetry import RequestStats

log = logging.getLogger(__name__)

__all__ = ["Agent", "AgentConfig"]


class Agent:
    """Build with `Agent.create(config)` (loads data, model, broker); then `start()`, `run()`."""

    def __init__(self, config: AgentConfig, runtime: Any, profile: DeviceProfile) -> None:
        self.config = config
        self.runtime = runtime  # edge_client.runtime.ModelRuntime: trainer + inference engine
        self.profile = profile
        k = len(config.tasks)
        self.task_index = {name: i for i, name in enumerate(config.tasks)}
        self.policy = make_policy(config.policy, config.loss_weighting)
        self.queues = RequestQueues(k, config.queue_capacity, [config.slo_s] * k)
        self.stats = RequestStats()
        self.rates = EwmaRates(k)
        self.gate = ShareGate()
        inf = [profile.inference_for(t) for t in config.tasks]
        self.inference_cost = [ServiceTimeProfiler(c.batch_fixed_s, c.per_request_s) for c in inf]
        tr = profile.training
        self.training_cost = ServiceTimeProfiler(tr.microbatch_fixed_s, tr.per_sample_s)
        self.alloc = Allocation(1.0, (1.0 / k,) * k, (1.0,) * k, 0, profile.max_batch)  # warm-up
        self.counters = Counters(trained_per_task=[0] * k, ce_sum_per_task=[0.0] * k)
        self.last_step_end = -math.inf
        self._stop = threading.Event()
        self._link: Any = None
        self._broker: Any = None
        self._telemetry_thread: threading.Thread | None = None
        self._overhead_lock = threading.Lock()
        self.started_s = time.monotonic()
        self.round_s = config.round_s  # the current round's length (an FL round sets its own)
        self.round_target = config.round_target_samples
        self._channel: Any = None  # edge_client.round_channel.RoundChannelServer when federated
        self._rounds = RoundSlot()
        self._own_model_dir: tempfile.TemporaryDirectory[str] | None = None  # create()'s; removed on stop
        self._last_tick_s = time.monotonic()  # when the last control period ended

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def create(cls, config: AgentConfig, profile: DeviceProfile | None = None) -> Agent:
        """Build the model (in config.model_dir, else a temp dir the agent removes when it stops)."""
        from edge_client.runtime import ModelRuntime

        own_dir = None
        model_dir = config.model_dir
        if model_dir is None:
            own_dir = tempfile.TemporaryDirectory(
                prefix=f"dartfl-{config.device_id}-", ignore_cleanup_errors=True
            )
            model_dir = Path(own_dir.name)
        try:
            runtime = ModelRuntime.build(config, model_dir)
            if profile is None:
                profile = runtime.calibrate(quick=True)
                log.info("calibrated costs: %s", profile)
            agent = cls(config, runtime, profile)
        except BaseException:
            if own_dir is not None:
                own_dir.cleanup()
            raise
        agent._own_model_dir = own_dir
        return agent

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> str:
        """Connect to the broker (starting the embedded one if none is given); return its URL.

        If that fails the agent is finished: it lets go of what it holds, its temp dir too.
        """
        try:
            return self._start()
        except BaseException:
            self._abort()
            raise

    def _start(self) -> str:
        from edge_client.agent_link import open_agent_link

        self._link, self._broker, url = open_agent_link(self.config, self._on_message)
        self._link.on_reconnected = self._republish_online
        self._publish_status("online")
        self._telemetry_thread = threading.Thread(target=self._telemetry_loop, name="telemetry", daemon=True)
        self._telemetry_thread.start()
        channel = self.config.round_channel or os.environ.get("DARTFL_ROUND_CHANNEL")
        if channel:
            from edge_client.round_channel import RoundChannelServer

            server = RoundChannelServer(channel, self._handle_round, self._channel_health)
            log.warning("round channel on %s", server.start())
            self._channel = server  # only a serving one: stop() would wait forever on another
        return url

    @property
    def round_channel_address(self) -> str | None:
        return None if self._channel is None else str(self._channel.address)

    def request_stop(self) -> None:
        """Ask the executor to stop; safe to call from a signal handler."""
        self._stop.set()

    def run(self) -> dict[str, Any]:
        """The executor loop; returns the final report after draining and disconnecting."""
        try:
            self._execute()
        except BaseException:
            self._abort()
            raise
        return self._shutdown()

    def _execute(self) -> None:
        period = self.config.period_s
        self._last_tick_s = time.monotonic()
        next_tick = self._last_tick_s + period  # the first period is a warm-up without training
        every = self.config.publish_every_s
        next_publish = time.monotonic() + every if every > 0 else math.inf
        self.counters.round_start_s = time.monotonic()
        while not self._stop.is_set():
            if self._rounds.pending is not None:
                self._begin_round()
            now = time.monotonic()
            job = self._rounds.active
            if job is not None and now >= job.started_s + job.duration_s:
                self._end_round(job)
            if now >= next_tick:
                self._tick(now)
                next_tick = max(next_tick + period, now + 0.5 * period)
                if now >= next_publish and self.runtime.publish_in_background():
                    next_publish = now + every
            alloc = self.alloc
            training_open = alloc.microbatch > 0
            if self.gate.should_serve(self.queues.total(), alloc.inference_share, training_open):
                self._serve_batch(alloc.max_batch)
            elif training_open:
                self._train_step(alloc)
            else:
                self.queues.wait(max(0.0, min(next_tick - time.monotonic(), 0.05)))

    def _shutdown(self) -> dict[str, Any]:
        self.queues.close()  # new requests are now rejected with `shutting-down`
        self._stop_rounds("the device agent is shutting down")
        deadline = time.monotonic() + self.config.drain_s
        drained = 0
        while self.queues.total() and time.monotonic() < deadline:
            drained += self._serve_batch(self.profile.max_batch)
        leftovers = self.queues.drain_all()
        for r in leftovers:
            self._reply(
                r.reply_to,
                protocol.encode_rejection(
                    request_id=r.id, reason="shutting-down", task=self.config.tasks[r.task]
                ),
                r.correlation_data,
            )
        self.stats.rejected_now(time.monotonic(), len(leftovers))
        report = self.report()
        report["drained"] = drained
        report["rejected_at_shutdown"] = len(leftovers)
        self._publish_telemetry()
        self._go_offline({"report": report}, flush_s=10.0)  # the drained answers go out first
        return report

    def _abort(self) -> None:
        """After a failure: stop the threads and let go of everything, without draining."""
        self._stop.set()
        self._stop_rounds("the device agent failed")
        self._go_offline({"error": "the agent failed"}, flush_s=2.0)

    def _stop_rounds(self, reason: str) -> None:
        if self._channel is not None:
            self._channel.stop()
        self._rounds.cancel(reason)

    def _go_offline(self, extra: dict[str, Any], flush_s: float) -> None:
        """Say "offline" (the clean disconnect makes the broker drop the last will, and a
        stopped agent must not stay "online"), let what is queued reach the broker, release."""
        if self._link is not None:
            try:
                self._publish_status("offline", extra=extra)
                self._link.flush(timeout=flush_s)
            except Exception as exc:  # the broker, or the link itself, went away first
                log.warning("could not say offline and flush before disconnecting: %s", exc)
        self._release()

    def _release(self) -> None:
        """Disconnect, stop the embedded broker, finish exporting, remove the own temp dir."""
        if self._link is not None:
            self._link.close()
        if self._broker is not None:
            self._broker.stop()
        self.runtime.close()
        if self._own_model_dir is not None:
            self._own_model_dir.cleanup()

    # -- ingress (paho's thread) --------------------------------------------------------------

    def _on_message(self, message: Any) -> None:
        started = time.thread_time()
        admit_request(
            message, self.task_index, self.config.max_payload_bytes, self.queues, self.stats, self._reply
        )
        self._add_overhead(time.thread_time() - started)

    # -- the executor -------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        started = time.thread_time()
        cfg, c = self.config, self.counters
        counts = self.queues.take_period_counts()
        # The counts cover the time since the last tick, not the nominal period: a tick late
        # behind a long batch, or early for a new round, would otherwise skew the smoothed
        # rates. (DART's own burst term still divides this period's count by period_s.)
        elapsed = max(now - self._last_tick_s, 1e-3)
        self._last_tick_s = now
        self.rates.update(counts.arrivals, elapsed)
        if self._rounds.active is not None:
            for k, n in enumerate(counts.arrivals):
                self._rounds.active.arrivals[k] += int(n)
        if self._channel is None and now - c.round_start_s >= self.round_s:
            c.rounds_done.append(c.round_trained)
            c.round_start_s, c.round_trained = now, 0
        tr = self.training_cost
        obs = Observation(
            now_s=now,
            period_s=cfg.period_s,
            backlog=self.queues.backlog(),
            oldest_age_s=self.queues.oldest_age_s(now),
            arrivals_since_last=counts.arrivals,
            slo_misses_since_last=counts.misses,
            training_misses_since_last=counts.training_misses,
            arrival_rate_per_s=self.rates.rates_per_s,
            slo_s=self.queues.slo_s,
            batch_fixed_s=tuple(p.fixed_s for p in self.inference_cost),
            per_request_s=tuple(p.per_item_s for p in self.inference_cost),
            max_batch=self.profile.max_batch,
            microbatch_fixed_s=tr.fixed_s,
            per_sample_s=tr.per_item_s,
            max_microbatch=self.profile.training.max_microbatch,
            round_start_s=c.round_start_s,
            round_deadline_s=c.round_start_s + self.round_s,
            round_target_samples=self.round_target,
            round_trained_samples=c.round_trained,
        )
        t0 = time.perf_counter_ns()
        self.policy.update(obs)
        self.alloc = self.policy.decide(obs)
        if self._channel is not None and self._rounds.active is None and self.alloc.microbatch:
            self.alloc = replace(self.alloc, microbatch=0)  # federated: train only within a round
        c.decision_us.append((time.perf_counter_ns() - t0) / 1e3)
        self._add_overhead(time.thread_time() - started)

    def _serve_batch(self, max_batch: int) -> int:
        task = most_urgent(self.queues.head_deadlines_s())
        if task < 0:
            return 0
        batch = self.queues.pop_batch(task, max_batch)
        if not batch:
            return 0
        t0 = time.monotonic()
        images = np.stack([r.image for r in batch]).astype(np.float32)[:, None, :, :] / 255.0
        cpu0 = time.thread_time()
        labels, version = self.runtime.classify(self.config.tasks[task], images)
        done = time.monotonic()
        self.counters.compute_cpu_s += time.thread_time() - cpu0
        started = time.thread_time()
        slo = self.config.slo_s
        for r, label in zip(batch, labels, strict=True):
            latency = done - r.received_s
            late = latency > slo
            self.queues.record_answer(task, late, r.received_s < self.last_step_end)
            if (job := self._rounds.active) is not None:
                job.answered += 1
                job.met += not late
            self.stats.answered(done, latency, not late)
            self._reply(
                r.reply_to,
                protocol.encode_reply(
                    request_id=r.id,
                    task=self.config.tasks[task],
                    label=int(label),
                    latency_ms=latency * 1e3,
                    model_version=str(version),
                ),
                r.correlation_data,
            )
        self._add_overhead(time.thread_time() - started)
        # The allocator plans with what a batch really costs the executor: preparing the
        # images and publishing the replies too, not only the model's forward pass.
        duration = time.monotonic() - t0
        self.gate.served(duration)
        self.inference_cost[task].observe(len(batch), duration)
        self.counters.inference_busy_s += duration
        return len(batch)

    def _train_step(self, alloc: Allocation) -> None:
        cpu0 = time.thread_time()
        result = self.runtime.train(alloc.microbatch, alloc.task_shares, alloc.loss_weights)
        c = self.counters
        c.compute_cpu_s += time.thread_time() - cpu0
        self.gate.trained(result.duration_s, alloc.inference_share)
        self.training_cost.observe(alloc.microbatch, result.duration_s)
        self.last_step_end = time.monotonic()
        c.training_busy_s += result.duration_s
        c.round_trained += alloc.microbatch
        for k, n in enumerate(result.samples_per_task):
            c.trained_per_task[k] += n
        for k, ce in enumerate(result.ce_sum_per_task):
            c.ce_sum_per_task[k] += ce

    # -- federated rounds (the round channel) -------------------------------------------------

    def _channel_health(self) -> dict[str, Any]:
        return {
            "device": self.config.device_id,
            "tasks": list(self.config.tasks),
            "policy": self.policy.name,
            "in_round": self._rounds.active is not None,
        }

    def _handle_round(
        self, meta: dict[str, Any], weights: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The round channel's handler thread: queue the round for the executor and wait for it."""
        job = round_job_from_meta(
            meta,
            weights,
            self.config.round_s,
            self.config.tasks,
            policy=self.config.policy,
            loss_weighting=self.config.weighting,
        )
        return self._rounds.run(job, self._stop)

    def _begin_round(self) -> None:
        """Executor thread: install the round's global weights and open its training window."""
        job = self._rounds.begin()
        if job is None:
            return
        t0 = time.monotonic()
        try:
            self.runtime.start_round(job.weights, job.learning_rate, job.step_samples)
        except Exception as exc:  # wrong shapes or tasks: fail the round, keep serving
            log.exception("could not install the round's weights")
            self._rounds.end(job, error=ConfigError(f"could not install the global weights: {exc}"))
            return
        now = time.monotonic()
        c = self.counters
        job.install_s = now - t0
        job.started_s = now
        job.trained_before = list(c.trained_per_task)
        job.ce_before = list(c.ce_sum_per_task)
        job.training_busy_before = c.training_busy_s
        job.inference_busy_before = c.inference_busy_s
        job.arrivals = [0] * len(self.config.tasks)
        self.round_s, self.round_target = job.duration_s, job.target
        c.round_start_s, c.round_trained = now, 0
        self._tick(now)  # plan the new round at once

    def _end_round(self, job: RoundJob) -> None:
        """Executor thread: close the round, flush the last step, hand back the update."""
        c, tasks = self.counters, self.config.tasks
        t0 = time.monotonic()
        weights = self.runtime.finish_round()
        c.training_busy_s += time.monotonic() - t0
        now = time.monotonic()
        c.rounds_done.append(c.round_trained)
        samples = {t: c.trained_per_task[k] - job.trained_before[k] for k, t in enumerate(tasks)}
        tr, m = self.training_cost, max(1, self.profile.training.max_microbatch)
        metrics = round_metrics(
            job,
            now_s=now,
            samples=samples,
            training_busy_s=c.training_busy_s - job.training_busy_before,
            inference_busy_s=c.inference_busy_s - job.inference_busy_before,
            modelled_per_sample_s=(tr.fixed_s + tr.per_item_s * m) / m,
            model_version=self.runtime.version,
            tasks=tasks,
            ce_sums={t: c.ce_sum_per_task[k] - job.ce_before[k] for k, t in enumerate(tasks)},
        )
        job.result = ({"device": self.config.device_id, "samples": samples, "metrics": metrics}, weights)
        self.alloc = replace(self.alloc, microbatch=0)  # serve only until the next round
        self._rounds.end(job)
        log.info("round %s done: %s", job.meta.get("server-round"), metrics)

    # -- egress -------------------------------------------------------------------------------

    def _reply(self, topic: str, payload: bytes, correlation_data: bytes | None = None) -> None:
        if self._link is not None:
            self._link.publish(topic, payload, qos=protocol.REPLY_QOS, correlation_data=correlation_data)

    def _add_overhead(self, cpu_s: float) -> None:
        with self._overhead_lock:
            self.counters.overhead_cpu_s += cpu_s

    def report(self) -> dict[str, Any]:
        """Totals and the latest window: the telemetry payload and the final report."""
        return build_report(self)

    def _publish_telemetry(self) -> None:
        if self._link is not None:
            topic = protocol.telemetry_topic(self.config.device_id)
            self._link.publish(topic, protocol.encode_telemetry(self.report()), qos=1)

    def _republish_online(self) -> None:
        """After a reconnect (paho's thread); not once stopping, when "offline" must stand."""
        if not self._stop.is_set():
            self._publish_status("online")

    def _publish_status(self, state: str, extra: dict[str, Any] | None = None) -> None:
        """The retained status: online/offline plus the cost profile (and the final report)."""
        if self._link is None:
            return
        body = json.loads(
            protocol.encode_status(self.config.device_id, online=state == "online", t=time.time())
        )
        body["profile"] = profile_dict(self.profile)
        body.update(extra or {})
        topic = protocol.status_topic(self.config.device_id)
        self._link.publish(topic, json.dumps(body).encode(), qos=1, retain=True)

    def _telemetry_loop(self) -> None:
        while not self._stop.wait(self.config.telemetry_period_s):
            try:
                self._publish_telemetry()
            except Exception:  # a broken link must not kill the device; paho reconnects
                log.exception("telemetry publish failed")
