"""`DcRun`: the books of one datacenter-mode simulated run (throughput, GPU time per role,
staleness, drops, switches, aborted work, the per-period series) and its JSON summary."""

from __future__ import annotations

from dataclasses import dataclass, field

from dartfl.datacenter.types import DcConfig

__all__ = ["SERIES", "DcRun"]

SERIES = (
    "t_s",
    "rollout_gpus",  # GPUs running rollout engines, lent trainer GPUs included
    "train_gpus",
    "switching_gpus",
    "hybrid_gpus",  # of rollout_gpus, the trainer's GPUs lent to rollout (verl-dynamic)
    "buffer_groups",
    "inflight_groups",
    "version",
    "staleness_max",
    "trained_samples",  # trained in the period that ends at t_s
)


@dataclass
class DcRun:
    """Everything one simulated run measured; `summary()` turns it into the CLI's JSON."""

    policy: str
    mode: str
    config: DcConfig
    eta: int
    makespan_s: float = 0.0
    steps: int = 0
    trained_samples: int = 0
    trained_tokens: float = 0.0
    generated_samples: int = 0
    dropped_samples: int = 0
    buffered_samples: int = 0
    inflight_samples: int = 0
    wasted_gpu_s: float = 0.0  # generation of the samples dropped as stale
    recompute_gpu_s: float = 0.0  # KV recomputed for sequences whose engine left rollout
    aborted_samples: int = 0  # sequences moved off engines that left rollout
    switches: int = 0
    gpus_moved: int = 0
    staleness_counts: dict[int, int] = field(default_factory=dict)  # staleness -> groups trained
    rollout_gpu_s: float = 0.0
    rollout_idle_gpu_s: float = 0.0
    train_gpu_s: float = 0.0
    train_idle_gpu_s: float = 0.0
    switching_gpu_s: float = 0.0
    booking_errors: int = 0  # ticks where the roles did not add up to the GPU count
    rollout_phase_s: float = 0.0  # colocated: time in the rollout phase
    series: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in SERIES})
    _trained_recorded: int = field(default=0, repr=False)

    def record(self, **row: float) -> None:
        """One row of the per-period series; `trained_samples` is filled in from the books."""
        row["trained_samples"] = self.trained_samples - self._trained_recorded
        self._trained_recorded = self.trained_samples
        for key in SERIES:
            self.series[key].append(float(row[key]))

    def summary(self) -> dict[str, object]:
        groups = sum(self.staleness_counts.values())
        stale_sum = sum(s * c for s, c in self.staleness_counts.items())
        span = max(1e-9, self.makespan_s * self.config.gpus)
        out: dict[str, object] = {
            "policy": self.policy,
            "samples_per_s": self.trained_samples / self.makespan_s if self.makespan_s else 0.0,
            "tokens_per_s": self.trained_tokens / self.makespan_s if self.makespan_s else 0.0,
            "steps": self.steps,
            "rollout_idle_ratio": self.rollout_idle_gpu_s / self.rollout_gpu_s if self.rollout_gpu_s else 0.0,
            "trainer_idle_ratio": self.train_idle_gpu_s / self.train_gpu_s if self.train_gpu_s else 0.0,
            "staleness_max": max(self.staleness_counts, default=0),
            "staleness_mean": stale_sum / groups if groups else 0.0,
            "dropped_samples": self.dropped_samples,
            "switches": self.switches,
            "gpus_moved": self.gpus_moved,
            "wasted_gpu_s": self.wasted_gpu_s,
            "aborted_gpu_s": self.recompute_gpu_s + self.wasted_gpu_s,
            "recompute_gpu_s": self.recompute_gpu_s,
            "aborted_samples": self.aborted_samples,
            "idle_gpu_s": self.rollout_idle_gpu_s + self.train_idle_gpu_s,
            "idle_ratio": (self.rollout_idle_gpu_s + self.train_idle_gpu_s) / span,
            "switching_gpu_s": self.switching_gpu_s,
            "makespan_s": self.makespan_s,
            "trained_samples": self.trained_samples,
            "generated_samples": self.generated_samples,
            "mode": self.mode,
            "eta": self.eta,
            "rollout_gpu_fraction": self.rollout_gpu_s / span,
            "switching_gpu_fraction": self.switching_gpu_s / span,
            "staleness_histogram": {str(k): v for k, v in sorted(self.staleness_counts.items())},
        }
        if self.mode == "colocated":
            out["rollout_share_of_step"] = self.rollout_phase_s / self.makespan_s if self.makespan_s else 0.0
        return out
