"""The device agent: one long-lived process per device that co-schedules inference and training.

The device's accounting and its choice of work are `dartfl.executor.DeviceExecutor`'s, the
object the simulator drives too; this module drives it with the monotonic clock and runs the
work items it hands out for real. Threads:
- paho's network thread runs `_on_message`: decode, then hand the request to the executor or
  answer at once with an error or rejection reply. It never blocks on the model, so a slow
  model cannot stall ingress, and a full queue rejects instead of growing;
- the executor thread (`run`) is the device: every control period it ticks the executor,
  and between periods it runs the inference batches (ONNX Runtime) and training microbatches
  (PyTorch) the executor picks, one at a time;
- a telemetry thread publishes a snapshot at a fixed rate (QoS 1);
- with `split_cores` and a profile of several cores the executor thread is the serving lane
  and a training lane's thread trains at the same time on the other cores (`agent_training`).
One lock (`_cond`) serialises every call into the executor; work runs outside it.
SIGTERM (via `request_stop`) stops training, drains the queue for up to `drain_s`, rejects
what is left with `shutting-down`, reports the totals and disconnects.

Its collaborators: the MQTT side in `agent_link` (connection, replies, telemetry, status),
request decoding in `agent_ingress`, answering a batch in `agent_serving`, training steps and
the training lane in `agent_training`, the lanes' cores in `agent_lanes`, when to publish the
status and telemetry in `agent_status`, the telemetry snapshot in `agent_report`, and, with
`round_channel` (or $DARTFL_ROUND_CHANNEL) set to 127.0.0.1:PORT, federated rounds in
`agent_rounds`: a Flower ClientApp hands a round over the round channel, the executor trains
it under the allocator until its deadline and returns the update. Between rounds such an
agent only serves (training then would be thrown away).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dartfl import protocol
from dartfl.errors import PolicyError
from dartfl.executor import (
    Admission,
    CoreSwitch,
    DeviceExecutor,
    InferenceBatch,
    ProfiledCosts,
    RoundClock,
    TrainingStep,
)
from dartfl.executor.batch_hold import wakes_executor
from dartfl.policies import make_policy
from dartfl.policies.base import SLOW_DECISION_SHARE, Policy
from dartfl.protocol import FinalReport, Telemetry
from dartfl.types import DeviceProfile, RequestPathCost
from edge_client.agent_config import AgentConfig
from edge_client.agent_ingress import QueuedRequest, admit_request
from edge_client.agent_lanes import LaneThreads
from edge_client.agent_report import Counters, build_report
from edge_client.agent_rounds import FederatedRounds
from edge_client.agent_serving import BatchServer
from edge_client.agent_status import StatusPublisher
from edge_client.agent_training import ModelTraining
from edge_client.answered import RecentRequests
from edge_client.path_meter import NetworkThreadMeter
from edge_client.telemetry import RequestStats
from edge_client.transit import TransitClock

if TYPE_CHECKING:
    from edge_client.agent_link import DeviceLink
    from edge_client.model_versions import ModelDirLock
    from edge_client.runtime import ModelRuntime
    from messaging.link import Message, MqttLink

log = logging.getLogger(__name__)

SLOW_SAID_EVERY_S = 60.0  # a slow decision (SLOW_DECISION_SHARE) is logged at most this often

__all__ = ["Agent", "AgentConfig"]


class Agent:
    """Build with `Agent.create(config)` (loads data, model, broker); then `start()`, `run()`."""

    def __init__(self, config: AgentConfig, runtime: ModelRuntime, profile: DeviceProfile) -> None:
        self.config = config
        self.runtime = runtime
        profile = config.device_profile(profile)
        self.profile = profile
        self.task_index = {name: i for i, name in enumerate(config.tasks)}
        policy = make_policy(config.policy, config.loss_weighting)
        federated = bool(config.round_channel or os.environ.get("DARTFL_ROUND_CHANNEL"))
        now = time.monotonic()
        rounds = RoundClock(config.round_s, config.round_target_samples, origin_s=now, periodic=not federated)
        self._costs = ProfiledCosts(profile, config.tasks)  # the executor's, learning as it serves
        self.device: DeviceExecutor[QueuedRequest] = DeviceExecutor(
            config.task_specs(), policy, profile, rounds, config.executor_config(profile), costs=self._costs
        )
        self.device.training_enabled = not federated  # a federated agent trains within rounds only
        self.device.on_policy_failure = self._serve_without_policy
        self._policy_failed: str | None = None  # a failure the retained status has yet to say
        self._said_slow_s = -math.inf  # when a slow decision was last logged
        self._cond = threading.Condition()  # serialises the executor; wakes_executor says when to notify
        # Prices the network thread's work, told to the cost model under the lock.
        self._path_meter = NetworkThreadMeter(lambda *n: self._costs.observe_request_path(*n), self._cond)
        self._transit = TransitClock()  # how long each request waited on its way here
        self.stats = RequestStats()
        self.recent = RecentRequests()  # a request delivered twice is answered once
        self.counters = Counters(ce_sum_per_task=[0.0] * len(config.tasks), started_s=now)
        self._stop = threading.Event()
        self._link: DeviceLink | None = None
        self._status = StatusPublisher(config.device_id, self, self._stop)
        self._telemetry_thread: threading.Thread | None = None
        self._rounds = FederatedRounds(config, runtime, self.device, self._cond, self.counters, self._tick)
        self._server = BatchServer(config, runtime, self.stats, self.recent, self._rounds, self._reply)
        cores = profile.cores.count
        self._threads = LaneThreads(runtime, self.device, self._cond, cores, config.training_threads)
        self._training = ModelTraining(
            runtime, self.device, self._cond, self.counters, self._rounds, self._threads, self._stop
        )
        self._own_model_dir: tempfile.TemporaryDirectory[str] | None = None  # create()'s; removed on stop
        self._model_dir_lock: ModelDirLock | None = None  # create()'s on a given model dir; released on stop
        self._last_tick_s = now  # when the last control period ended
        self._trained_at_publish = 0  # samples trained when the weights were last exported

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def create(cls, config: AgentConfig, profile: DeviceProfile | None = None) -> Agent:
        """Build the model (in config.model_dir, else a temp dir the agent removes when it stops)."""
        from edge_client.agent_link import check_private_broker
        from edge_client.model_versions import ModelDirLock
        from edge_client.runtime import ModelRuntime

        check_private_broker(config)  # fail in a moment, not after loading the data
        own_dir = lock = None
        model_dir = config.model_dir
        if model_dir is None:
            own_dir = tempfile.TemporaryDirectory(
                prefix=f"dartfl-{config.device_id}-", ignore_cleanup_errors=True
            )
            model_dir = Path(own_dir.name)
        else:  # one agent per model dir: ConfigError naming the other's pid
            lock = ModelDirLock.acquire(model_dir)
        try:
            runtime = ModelRuntime.build(config, model_dir)
            if profile is None:
                profile = runtime.calibrate(quick=True)
                log.info("calibrated costs: %s", profile)
            agent = cls(config, runtime, profile)
        except BaseException:
            if own_dir is not None:
                own_dir.cleanup()
            if lock is not None:
                lock.release()
            raise
        agent._own_model_dir = own_dir
        agent._model_dir_lock = lock
        return agent

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> str:
        """Connect to the broker (starting a private Mosquitto if none is given); return its URL.
        A broker that is not up yet is waited for until `request_stop` (MqttWaitStoppedError).

        If that fails the agent is finished: it lets go of what it holds, its temp dir too.
        """
        try:
            return self._start()
        except BaseException:
            self._abort()
            raise

    def _start(self) -> str:
        from edge_client.agent_link import DeviceLink, open_agent_link

        self._request_path_up()
        link, broker, url = open_agent_link(self.config, self._on_message, self._stop)
        link.on_reconnected = self._republish_online
        link.on_connected = self._request_path_up
        self._link = DeviceLink(self.config.device_id, link, broker)
        if self.profile.request_path == RequestPathCost():  # the profile prices the model alone
            self._price_request_path(link)
        if self.device.lanes is not None:
            self._threads.prepare()  # every core count's sessions, before the first request
        self._status.status(self._link, online=True)
        self._telemetry_thread = self._status.start_telemetry(self._link, self.config.telemetry_period_s)
        channel = self.config.round_channel or os.environ.get("DARTFL_ROUND_CHANNEL")
        if channel:
            log.warning("round channel on %s", self._rounds.open_channel(channel, self._stop))
        return url

    def _price_request_path(self, link: MqttLink) -> None:
        """Measure what a request costs besides the model on this agent's own path and start
        planning with it: the replayer sizes `--target-load` from the profile published next."""
        from edge_client.request_path import measure_request_path

        path = measure_request_path(self.profile, self.config.tasks, link)
        log.info("request path: %.0f us per request besides the model", path.per_request_s * 1e6)
        self.profile = replace(self.profile, request_path=path)
        with self._cond:
            self._costs = ProfiledCosts(self.profile, self.config.tasks)
            self.device.costs = self._costs

    def cost_profile(self) -> DeviceProfile:
        """The costs the agent plans with now, end to end (published in status and telemetry)."""
        with self._cond:
            return self._costs.profile(self.profile, self.config.tasks)

    def request_price(self) -> tuple[float, ...]:
        """Per task: what a request costs besides the model now (the status says it)."""
        with self._cond:
            return self._costs.per_request_s

    @property
    def round_channel_address(self) -> str | None:
        channel = self._rounds.channel
        return None if channel is None else str(channel.address)

    def request_stop(self) -> None:
        """Ask the executor to stop; safe to call from a signal handler."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def run(self) -> FinalReport:
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
        self._training.start_lane()
        try:
            self._serve_lane(next_tick, period, every, next_publish)
        finally:
            self._training.stop_lane()

    def _publish_if_trained(self, now: float, every: float, due: float) -> float:
        """Export the weights if they trained since the last export (an export of the same
        weights made a new version that looked like progress); the next time one is due."""
        trained = sum(self.device.trained_per_task)
        if trained == self._trained_at_publish:
            return now + every
        if not self.runtime.publish_in_background():
            return due  # the last export still runs: try again at the next tick
        self._trained_at_publish = trained
        return now + every

    def _serve_lane(self, next_tick: float, period: float, every: float, next_publish: float) -> None:
        """The executor thread: ticks, and the serving lane's items (every item when not split)."""
        while not self._stop.is_set():
            if self.device.lanes is None:
                self._training.step_rounds()
            now = time.monotonic()
            if now >= next_tick:
                self._tick(now)
                next_tick = max(next_tick + period, now + 0.5 * period)
                if now >= next_publish:
                    next_publish = self._publish_if_trained(now, every, next_publish)
            with self._cond:
                if (hold := self.device.hold_left_s(time.monotonic())) > 0.0:
                    self._cond.wait(hold)  # let a few more requests join this batch
                    continue
                work = self.device.next_work(time.monotonic())
                expired = self.device.take_expired() if self.device.expired else ()
                if work is None and not expired:
                    self._cond.wait(max(0.0, min(next_tick - time.monotonic(), 0.05)))
            self._server.refuse_expired(expired)
            if isinstance(work, InferenceBatch):
                self._serve(work)
            elif isinstance(work, TrainingStep):
                self._training.train(work)
            elif isinstance(work, CoreSwitch):
                self._threads.switch(work)

    @property
    def pinning(self) -> dict[str, str]:
        """Per lane: "" where its thread is pinned to its CPUs, else why not."""
        return self._threads.pinning

    def _shutdown(self) -> FinalReport:
        with self._cond:
            self.device.close()  # new requests are now rejected with `shutting-down`
        self._rounds.close("the device agent is shutting down")
        deadline = time.monotonic() + self.config.drain_s
        drained = 0
        while time.monotonic() < deadline:
            with self._cond:
                batch = self.device.take_batch(time.monotonic(), self.profile.max_batch)
                expired = self.device.take_expired()
            self._server.refuse_expired(expired)
            if batch is None:
                break
            drained += self._serve(batch)
        with self._cond:
            leftovers = self.device.drain()
        for task, r in leftovers:
            refused = protocol.refusal(r.binary, r.id, "shutting-down", self.config.tasks[task])
            self._reply(r.reply_to, refused, r.correlation_data)
        self.stats.rejected_now(time.monotonic(), len(leftovers))
        report = FinalReport.of(self.report(), drained=drained, rejected_at_shutdown=len(leftovers))
        if self._link is not None:
            self._link.telemetry(self.report())
        self._go_offline(flush_s=10.0, report=report)  # the drained answers go out first
        return report

    def _abort(self) -> None:
        """After a failure: stop the threads and let go of everything, without draining."""
        self._stop.set()
        self._rounds.close("the device agent failed")
        self._go_offline(flush_s=2.0, error="the agent failed")

    def _go_offline(
        self, flush_s: float, report: FinalReport | None = None, error: str | None = None
    ) -> None:
        """Say "offline" (the clean disconnect makes the broker drop the last will, and a
        stopped agent must not stay "online"), let what is queued reach the broker, release."""
        if self._link is not None:
            try:
                self._status.status(self._link, online=False, report=report, error=error)
                self._link.flush(flush_s)
            except Exception as exc:  # the broker, or the link itself, went away first
                log.warning("could not say offline and flush before disconnecting: %s", exc)
        self._release()

    def _release(self) -> None:
        """Disconnect, stop the private broker, finish exporting, remove the own temp dir,
        let go of the model dir."""
        if self._link is not None:
            self._link.close()
        self.runtime.close()
        if self._own_model_dir is not None:
            self._own_model_dir.cleanup()
        if self._model_dir_lock is not None:
            self._model_dir_lock.release()

    # -- ingress (paho's thread) --------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        entered = self._path_meter.entered()
        admit_request(
            message,
            self.task_index,
            self.config.max_payload_bytes,
            self._admit,
            self.stats,
            self._reply,
            reply_rule=self.config.reply_topics,
            recent=self.recent,
            transit=self._transit,
        )
        self._add_overhead(self._path_meter.left(entered))

    def _admit(self, received_s: float, task: int, request: QueuedRequest, waited_s: float) -> Admission:
        with self._cond:
            outcome = self.device.admit(received_s, task, request, waited_s)
            if outcome == "queued" and wakes_executor(self.device.queues.total):
                self._cond.notify_all()  # the serving lane, whichever lane waits first
            return outcome

    # -- the executor -------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        started = time.thread_time()
        # The counts cover the time since the last tick, not the nominal period: a tick late
        # behind a long batch, or early for a new round, would otherwise skew the smoothed
        # rates. (DART's own burst term still divides this period's count by period_s.)
        elapsed = max(now - self._last_tick_s, 1e-3)
        self._last_tick_s = now
        with self._cond:
            device = self.device
            self._rounds.count_arrivals(device.period_arrivals)
            device.close_due_rounds(now)
            device.tick(now, elapsed)
            failed, self._policy_failed = self._policy_failed, None
            decided_s = device.decision_ns[-1] * 1e-9
        if failed is not None and self._link is not None:
            self._status.status(self._link, online=True, error=failed)
        period_s = self.config.period_s
        if decided_s > SLOW_DECISION_SHARE * period_s and now - self._said_slow_s >= SLOW_SAID_EVERY_S:
            # The decision holds the device's lock: every request waited it out (docs/plugins.md).
            self._said_slow_s = now
            log.warning(
                "policy %r took %.1f ms to decide, %.0f%% of the %g ms control period: requests wait "
                "while it decides (said at most once a minute)",
                device.policy.name,
                decided_s * 1e3,
                100 * decided_s / period_s,
                period_s * 1e3,
            )
        self._add_overhead(time.thread_time() - started)

    def _serve_without_policy(self, exc: PolicyError) -> Policy:
        """A policy's bug (a plugin's: docs/plugins.md) must not stop a device that answers
        live traffic: it serves on without training until restarted, and says why in the log
        and (`_tick`, outside the lock) in its retained status."""
        self._policy_failed = f"{exc}; serving on with inference-only until the agent is restarted"
        log.error("%s", self._policy_failed, exc_info=exc.__cause__)
        return make_policy("inference-only")

    def _serve(self, batch: InferenceBatch[QueuedRequest]) -> int:
        """Answer one batch: classify on ONNX Runtime, reply to each request, account."""
        t0 = time.monotonic()
        served = self._server.answer(batch)
        self._add_overhead(served.overhead_cpu_s)
        # The allocator plans with what a batch really costs the executor: preparing the
        # images and publishing the replies too, not only the model's forward pass.
        with self._cond:
            self.counters.compute_cpu_s += served.compute_cpu_s  # the training lane adds to it too
            self.device.batch_done(batch, served.done_s, time.monotonic() - t0)
        return len(batch.requests)

    # -- egress -------------------------------------------------------------------------------

    def _reply(self, topic: str, reply: protocol.Encoded, correlation_data: bytes | None = None) -> None:
        if self._link is not None:
            self._link.reply(topic, reply, correlation_data)

    def _add_overhead(self, cpu_s: float) -> None:
        with self._cond:
            self.counters.overhead_cpu_s += cpu_s

    def report(self) -> Telemetry:
        """Totals and the latest window: the telemetry snapshot."""
        with self._cond:
            profile = self._costs.profile(self.profile, self.config.tasks)
            return build_report(
                self.config, self.device, self.stats, self.counters, self.runtime.version, profile
            )

    def _request_path_up(self) -> None:
        """The broker link is up (again): what waited while it was down did not wait for the
        CPU, so the training that ran meanwhile is not blamed for it (paho's thread)."""
        with self._cond:
            self.device.request_path_up(time.monotonic())

    def _republish_online(self) -> None:
        """After a reconnect (paho's thread); not once stopping, when "offline" must stand."""
        if self._link is not None:
            self._status.republish_online(self._link)
