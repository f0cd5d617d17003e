"""The device agent's training: a step on PyTorch under the model lock (whichever lane the
executor hands it to), the training lane's thread of a split device, and the hand-over of a
federated round between steps.

With `split_cores` and a profile of several cores the agent's executor thread is the serving
lane and the training lane's thread trains at the same time on the other cores: each lane
pins itself to its CPUs and resizes its thread pool when the allocator moves cores (a
`CoreSwitch`, at a work-item boundary: queued requests wait in the executor meanwhile, none
is dropped), ONNX Runtime with k intra-op threads, PyTorch with N - k (edge_client/core_pinning.py
says where pinning holds). One model trains one step at a time, so a serving-lane step waits
for the training lane's (`ExecutorConfig.concurrent_steps`), and a federated round is handed
over on the training lane's thread, between steps, under the model lock.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from dartfl.executor import TRAINING_LANE, CoreSwitch, DeviceExecutor, TrainingStep
from edge_client.agent_lanes import LaneThreads
from edge_client.agent_report import Counters
from edge_client.agent_rounds import FederatedRounds

if TYPE_CHECKING:
    from edge_client.runtime import ModelRuntime

__all__ = ["ModelTraining"]


class ModelTraining:
    """Training steps on the agent's model, and the training lane of a split device.

    `lock` is the agent's, which serialises `device`; `stop` is the agent's stop event."""

    def __init__(
        self,
        runtime: ModelRuntime,
        device: DeviceExecutor[Any],
        lock: threading.Condition,
        counters: Counters,
        rounds: FederatedRounds,
        threads: LaneThreads,
        stop: threading.Event,
    ) -> None:
        self.runtime, self.device, self.lock, self.counters = runtime, device, lock, counters
        self.rounds, self.threads, self.stop = rounds, threads, stop
        # The model: a training step (either lane) and a round's hand-over take it in turn.
        self.model_lock = threading.Lock()
        self._lane: threading.Thread | None = None

    def start_lane(self) -> None:
        """Start the training lane's thread, when the device is split into lanes."""
        if self.device.lanes is not None:
            self._lane = threading.Thread(target=self._train_lane, name="training-lane", daemon=True)
            self._lane.start()

    def stop_lane(self) -> None:
        """Stop the training lane's thread (the agent is stopping) and wait for it."""
        if self._lane is not None:
            self.stop.set()
            with self.lock:
                self.lock.notify_all()
            self._lane.join()

    def step_rounds(self) -> None:
        """Begin or end a federated round (the executor thread; the training lane's, when split)."""
        if self.device.lanes is None:
            self.rounds.step(time.monotonic())
        elif self.rounds.due(time.monotonic()):
            # A hand-over touches the model: no new step on either lane, wait out the step in
            # flight (it belongs to the round ending and is accounted before the lock is free).
            with self.lock:
                self.device.training_enabled = False
            with self.model_lock:
                self.rounds.step(time.monotonic())

    def _train_lane(self) -> None:
        """The training lane of a split device: its steps and its switches, until stopped."""
        while not self.stop.is_set():
            self.step_rounds()
            with self.lock:
                work = self.device.next_work(time.monotonic(), TRAINING_LANE)
                if work is None:
                    self.lock.wait(0.05)
            if isinstance(work, TrainingStep):
                self.train(work)
            elif isinstance(work, CoreSwitch):
                self.threads.switch(work)

    def train(self, step: TrainingStep) -> None:
        if self.device.lanes is not None:  # a split lane trains with its own cores' threads
            self.threads.torch_threads(max(1, step.cores))
        with self.model_lock:  # until accounted: a round that ends next counts this step
            cpu0 = time.thread_time()
            result = self.runtime.train(step.samples, step.task_shares, step.loss_weights)
            cpu_s = time.thread_time() - cpu0
            with self.lock:
                self.counters.compute_cpu_s += cpu_s
                self.counters.training_cpu_s += cpu_s
                for k, ce in enumerate(result.ce_sum_per_task):
                    self.counters.ce_sum_per_task[k] += ce
                self.device.step_done(step, time.monotonic(), result.duration_s, result.samples_per_task)
                self.lock.notify_all()  # the other lane may wait for the model
