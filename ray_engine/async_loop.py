"""The asynchronous loop of the Ray engine (`static:F`, `dart` and `verl-dynamic`).

Rollout workers decode in short slices so the driver can admit prompts, publish weights and
switch roles between them; the trainer workers run one data-parallel step at a time on the
oldest groups within the staleness bound. Nothing here blocks on a single worker: slices,
training shards and role switches are all in flight together, and the driver handles each
as it lands. Under verl-dynamic (`lending`) the trainer workers are lent to rollout between
steps and reclaimed once the policy's threshold of groups is sampleable.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import ray

from dartfl.datacenter.policies import VerlDynamic
from dartfl.datacenter.worker_split import MeasuredRates, WorkerSplitController
from ray_engine.actors import SLOTS, SWITCH_S, ShardResult, SliceResult
from ray_engine.books import RayRun, RayRunConfig, shards
from ray_engine.lending import RayLending

if TYPE_CHECKING:
    from ray_engine.engine import Learner

__all__ = ["SLICE_STEPS", "AsyncRun"]

SLICE_STEPS = 8  # decode steps per slice: short enough to switch and admit promptly
# DART judges a layout on the buffer averaged over this many training steps at it: the
# depth saws up and down by a whole batch every step, so a shorter look is mostly noise
# (and answering noise thrashes between layouts).
JUDGE_STEPS = 4


class AsyncRun:
    """One asynchronous run; `controller` (DART) re-splits the workers, None keeps the split."""

    def __init__(
        self,
        cfg: RayRunConfig,
        workers: list[Any],
        queue: Any,
        learner: Learner,
        run: RayRun,
        rates: MeasuredRates,
        controller: WorkerSplitController | None,
        first_rollout: int,
        lending: VerlDynamic | None = None,
    ) -> None:
        self.cfg, self.workers, self.queue = cfg, workers, queue
        self.learner, self.run_, self.rates, self.controller = learner, run, rates, controller
        self.lending = RayLending(lending, cfg.steps, cfg.batch_groups) if lending is not None else None
        n = len(workers)
        self.roles = ["rollout" if i < first_rollout else "train" for i in range(n)]
        self.active = [0] * n  # sequences in flight per worker, as of its last report
        self.granted = [0] * n  # admissions reserved for a worker's slice in flight
        self.orphans: list[dict[str, Any]] = []  # sequences of a worker that left rollout
        self.slices: dict[Any, tuple[int, float]] = {}  # ref -> (worker, dispatched at)
        self.switching: dict[Any, tuple[int, str]] = {}  # ref -> (worker, new role)
        self.train_refs: list[Any] = []
        self.train_batch: list[dict[str, Any]] = []
        self.train_started = 0.0
        self.version = 0
        self.depth = 0  # groups buffered, as of the last admission call
        self.sampleable = 0  # groups the next step could train on, as of the last admission call
        self.depth_area = 0.0  # integral of the depth over the control period
        # The layout's window opens at its first trained step (the pipeline is primed by then)
        self.window: list[float] | None = None  # [depth integral, seconds, steps], once open
        run.layouts.add(self._layout())

    def run(self) -> None:
        cfg = self.cfg
        start = last = time.perf_counter()
        period_start = start
        self._sample(0.0, 0.0)
        while self.version < cfg.steps:
            now = time.perf_counter()
            self._book_time(now - last)
            last = now
            self._dispatch_rollout()
            self._dispatch_training()
            pending = [*self.slices, *self.train_refs, *self.switching]
            if pending:  # nothing in flight only for a moment, while stale groups drain
                ready, _ = ray.wait(pending, num_returns=1, timeout=cfg.period_s)
                for ref in ready:
                    self._handle(ref)
            now = time.perf_counter()
            if now - period_start >= cfg.period_s:
                self._sample(now - start, self.depth_area / (now - period_start))
                self._control()
                period_start, self.depth_area = now, 0.0
        end = time.perf_counter()
        self.run_.wall_s = end - start
        _, _, self.run_.dropped_groups, _ = ray.get(self.queue.capacity.remote(self.version, 0))
        self._sample(end - start, self.depth_area / max(end - period_start, 1e-9))

    def _layout(self) -> str:
        return "/".join(self.roles)

    def _book_time(self, dt: float) -> None:
        for role in self.roles:
            self.run_.role_s[role] += dt
        self.depth_area += self.depth * dt
        if self.window is not None:
            self.window[0] += self.depth * dt
            self.window[1] += dt

    def _dispatch_rollout(self) -> None:
        """Every rollout worker without a slice gets one: first the orphaned sequences it has
        room for, then a share of what the admission bound allows."""
        running = sum(self.active) + sum(self.granted) + len(self.orphans)
        capacity, self.depth, self.run_.dropped_groups, self.sampleable = ray.get(
            self.queue.capacity.remote(self.version, running)
        )
        busy = {i for i, _ in self.slices.values()}
        idle = [i for i, role in enumerate(self.roles) if role == "rollout" and i not in busy]
        for k, i in enumerate(idle):
            room = max(0, SLOTS - self.active[i])
            adopted, self.orphans = self.orphans[:room], self.orphans[room:]
            # An even share of what the bound allows, beyond the free slots: sequences finish
            # during the slice and their slots should refill at once. Unused grants return.
            grant = max(0, min(capacity // (len(idle) - k), 2 * SLOTS))
            capacity -= grant
            self.active[i] += len(adopted)
            if not (self.active[i] or grant):
                continue
            self.granted[i] = grant
            ref = self.workers[i].run_steps.remote(
                self.learner.weights, self.version, grant, adopted, SLICE_STEPS
            )
            self.slices[ref] = (i, time.perf_counter())

    def _dispatch_training(self) -> None:
        """One step at a time, on the oldest batch within the bound, over the trainers."""
        trainers = [i for i, role in enumerate(self.roles) if role == "train"]
        lending = self.lending
        if lending is not None and not self.train_refs and lending.should_reclaim(self.sampleable):
            back = [i for i in lending.lent if self.roles[i] == "rollout"]
            if len(back) == len(lending.lent):  # every lent worker has landed in rollout
                self._switch(lending.reclaimed(), "train", lending.reclaim_s)
            return
        if self.train_refs or not trainers or (lending is not None and lending.lent):
            return
        batch = ray.get(self.queue.take.remote(self.version))
        if lending is not None:
            lending.waiting(time.perf_counter(), batch is not None, self.sampleable)
        if batch is None:
            return
        self.train_batch, self.train_started = batch, time.perf_counter()
        self.train_refs = [
            self.workers[i].gradients.remote(self.learner.weights, self.version, part)
            for i, part in zip(trainers, shards(batch, len(trainers)), strict=False)
        ]

    def _handle(self, ref: Any) -> None:
        if ref in self.slices:
            i, dispatched = self.slices.pop(ref)
            result: SliceResult = ray.get(ref)
            self.active[i], self.granted[i] = result.active, 0
            if result.groups:
                self.queue.put.remote(result.groups)  # actor calls run in order: no wait needed
            lengths = [g["tokens"].shape[1] for g in result.groups]
            waits = [g["wait_s"] for g in result.groups]
            self.rates.observe_slice(result.steps, time.perf_counter() - dispatched, lengths, waits)
            self.run_.busy_s["rollout"] += result.busy_s
            self.run_.recompute_s += result.recompute_s
        elif ref in self.switching:
            i, role = self.switching.pop(ref)
            leaving: list[dict[str, Any]] = ray.get(ref)
            self.orphans += leaving
            self.run_.migrated += len(leaving)
            self.active[i], self.roles[i] = 0, role
            self.run_.layouts.add(self._layout())
            self.window = None  # the new layout is judged on its own steps
        elif (
            ref in self.train_refs
            and not ray.wait(self.train_refs, num_returns=len(self.train_refs), timeout=0)[1]
        ):
            results: list[ShardResult] = ray.get(self.train_refs)
            self.learner.apply([r.grads for r in results])
            self.run_.trained(self.train_batch, self.version)
            busy = [r.busy_s for r in results]
            self.run_.busy_s["train"] += sum(busy)
            wall_s = time.perf_counter() - self.train_started
            self.rates.observe_step(wall_s, busy, sum(r.tokens for r in results), len(self.train_batch))
            self.train_refs = []
            self.version += 1
            if self.window is None:
                self.window = [0.0, 0.0, 0.0]
            else:
                self.window[2] += 1
            self._step_ended()

    def _step_ended(self) -> None:
        """verl-dynamic: at a step's end, lend the trainer workers to rollout if it says so."""
        lending = self.lending
        if lending is None or self.version >= self.cfg.steps:
            return
        trainers = [i for i, role in enumerate(self.roles) if role == "train"]
        _, _, _, sampleable = ray.get(self.queue.capacity.remote(self.version, 0))
        standalone = self.roles.count("rollout")
        if trainers and lending.step_ended(self.version, sampleable, standalone, len(trainers)):
            lending.lend(trainers)
            self._switch(trainers, "rollout", lending.lend_s)

    def _switch(self, workers: list[int], role: str, dead_s: float) -> None:
        """Move `workers` to `role`: each pays `dead_s`, the driver does not wait for it."""
        for i in workers:
            self.roles[i] = "switching"
            self.switching[self.workers[i].set_role.remote(role, dead_s)] = (i, role)
        self.run_.switches += 1

    def _sample(self, t_s: float, buffer_groups: float) -> None:
        """One row of the run's time series (at the start, every control period, the end)."""
        roles = self.roles
        self.run_.record(
            t_s, roles.count("rollout"), roles.count("train"), roles.count("switching"), buffer_groups
        )

    def _control(self) -> None:
        """Once per control period, DART may move one worker."""
        roles = self.roles
        window = self.window
        if self.controller is None or self.switching or window is None or window[2] < JUDGE_STEPS:
            return  # one move at a time, each layout judged on steps trained at it
        current = roles.count("rollout")
        target = self.controller.decide(current, self.rates, window[0] / max(window[1], 1e-9))
        if target == current:
            return
        if target > current:  # a trainer joins rollout (after its shard in flight, if any)
            move, role = roles.index("train"), "rollout"
        else:  # the rollout worker with the least in flight leaves; its sequences move on
            rollout = [i for i, r in enumerate(roles) if r == "rollout"]
            move, role = min(rollout, key=lambda i: self.active[i]), "train"
        self._switch([move], role, SWITCH_S)
