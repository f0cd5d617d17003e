"""What the fleet's fluid model keeps per device: the costs, SLOs and bounds it runs on
(`DeviceArrays`), and the executor state and running totals one period hands to the next
(`FleetState`). `dartfl.sim.fleet_period` advances the state by a period."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dartfl.sim.fleet_types import FloatArray, IntArray

__all__ = ["DeviceArrays", "FleetState"]


@dataclass(frozen=True, eq=False)
class DeviceArrays:
    """Every device's costs, SLOs and bounds: (tasks, devices) per task, else (devices,)."""

    fixed: FloatArray  # a_k, batch-fixed seconds
    per: FloatArray  # c_k, per-request seconds
    cheapest: FloatArray  # the fluid limit's price of a request (dartfl.fluid; c_k + a_k / b_max on one core)
    slo: FloatArray
    capacity: FloatArray  # queue bound per task
    max_batch: IntArray
    a_t: FloatArray  # training step fixed seconds
    c_t: FloatArray  # training seconds per sample
    max_microbatch: IntArray
    cheapest_sample: FloatArray  # the fluid limit's price of a sample
    fluid_units: FloatArray  # the fluid limit's device time per second: N cores, or one GPU
    offload_s_per_s: FloatArray  # GPU-seconds per second a GPU device's cores can take off its GPU


@dataclass(eq=False)
class FleetState:
    """Every device's executor state and running totals; per-task arrays are (tasks, devices)."""

    tau: float
    horizon_s: float
    dev: DeviceArrays  # the costs, SLOs and bounds it runs on
    now_s: float
    queue: FloatArray
    head_s: FloatArray  # arrival time of each queue's oldest request
    carry_s: FloatArray  # time left of the step in flight at the period start
    carry_m: FloatArray  # its samples
    carry_task: FloatArray  # its samples per task
    credit: FloatArray  # inference time earned by steps and not yet used (x < 1)
    trained: FloatArray
    trained_per_task: FloatArray
    training_busy: FloatArray
    inference_busy: FloatArray
    rejected_total: FloatArray
    accepted: FloatArray
    slo_met: FloatArray
    latency_sum: FloatArray
    max_backlog: FloatArray
    misses: FloatArray  # last period: expected SLO misses (rejections included), per task
    training_misses: FloatArray  # last period: the misses training caused (fleet_period's phases)

    @classmethod
    def start(cls, dev: DeviceArrays, tau: float, horizon_s: float) -> FleetState:
        k, d = dev.fixed.shape

        def zeros() -> FloatArray:
            return np.zeros(d)

        def task_zeros() -> FloatArray:
            return np.zeros((k, d))

        return cls(
            tau=tau,
            horizon_s=horizon_s,
            dev=dev,
            now_s=0.0,
            queue=task_zeros(),
            head_s=task_zeros(),
            carry_s=zeros(),
            carry_m=zeros(),
            carry_task=task_zeros(),
            credit=zeros(),
            trained=zeros(),
            trained_per_task=task_zeros(),
            training_busy=zeros(),
            inference_busy=zeros(),
            rejected_total=zeros(),
            accepted=zeros(),
            slo_met=zeros(),
            latency_sum=zeros(),
            max_backlog=zeros(),
            misses=task_zeros(),
            training_misses=task_zeros(),
        )

    def finish(self, max_batch: IntArray) -> FloatArray:
        """The horizon is over: as in the event simulator, the step in flight still completes
        and the queue drains at full speed, in batches of `max_batch` (the last allocation's).
        Returns how long that takes."""
        batches = np.ceil(self.queue / max_batch.astype(np.float64) - 1e-9)
        dev = self.dev
        drain: FloatArray = (dev.fixed * batches + dev.per * self.queue).sum(axis=0)
        overrun: FloatArray = self.carry_s + drain
        self.trained += self.carry_m
        self.trained_per_task += self.carry_task
        self.training_busy += self.carry_s
        self.carry_s = np.zeros_like(self.carry_s)
        self.carry_m = np.zeros_like(self.carry_m)
        self.carry_task = np.zeros_like(self.carry_task)
        return overrun
