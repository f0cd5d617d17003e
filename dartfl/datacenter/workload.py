"""Agentic multi-turn episodes, and the named workload presets of `dartfl dc sim --workload`.

An agentic episode alternates generation and tool calls: the model writes a turn, calls a
tool, waits for the environment (a search API answers in tens of milliseconds, a sandbox runs
code in seconds, a test suite or a cold container takes tens of seconds), reads the tool's
output into its context and writes the next turn, until it answers. Per sample:

- the number of tool calls is Poisson around a prompt-level rate (Gamma-distributed, so a
  hard prompt makes every sample of its group call more), and its mean drifts over training
  as the policy learns to use the tool (`calls_start` to `calls_end`);
- each turn's length and each tool output's length are log-normal, truncated;
- each environment pause is drawn from a mixture of log-normal latency classes, cut at the
  tool's timeout;
- the context grows by every turn and every tool output; an episode that would outgrow
  `max_context_tokens` answers at once (truncation);
- during a pause the episode's KV cache is either kept (its memory stays allocated, no
  recompute) or evicted (memory freed, the whole context prefilled again on resume).

The parameters of the presets and their sources are in docs/datacenter.md ("Agentic
workloads"). `progress` runs from 0 (first training step) to 1 (last).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.datacenter.lengths import LengthModel, LogNormalLengths
from dartfl.errors import ConfigError

__all__ = ["KV_MODES", "WORKLOADS", "AgenticWorkload", "LatencyClass", "Workload", "WorkloadPreset"]

KV_MODES = ("keep", "evict")
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class LatencyClass:
    """One kind of tool call: its share of calls and its log-normal latency (median, sigma)."""

    share: float
    median_s: float
    sigma: float

    def __post_init__(self) -> None:
        if not (0.0 < self.share <= 1.0 and self.median_s > 0 and self.sigma >= 0):
            raise ConfigError(f"latency class needs share in (0, 1], median > 0, sigma >= 0, got {self}")


def _lognormal(rng: np.random.Generator, size: int, median: float, sigma: float, cap: float) -> FloatArray:
    values = np.exp(math.log(median) + sigma * rng.standard_normal(size))
    return np.minimum(np.maximum(np.rint(values), 1.0), cap)


@dataclass(frozen=True)
class AgenticWorkload:
    """Multi-turn tool-using episodes (module docstring). Tokens per turn, seconds per pause."""

    calls_start: float = 1.0
    calls_end: float = 3.5
    calls_shape: float = 2.0  # Gamma shape of a prompt's call rate: smaller, more variable
    max_calls: int = 8
    turn_median_tokens: float = 384.0
    turn_sigma: float = 0.9
    turn_max_tokens: int = 4096
    output_median_tokens: float = 192.0
    output_sigma: float = 1.0
    output_max_tokens: int = 2048
    latency: tuple[LatencyClass, ...] = (
        LatencyClass(0.55, 0.08, 0.7),
        LatencyClass(0.40, 1.5, 0.8),
        LatencyClass(0.05, 12.0, 0.6),
    )
    timeout_s: float = 60.0
    max_context_tokens: int = 32768
    kv: str = "keep"

    def __post_init__(self) -> None:
        for name in ("calls_start", "calls_end"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"agentic {name} must be a finite number >= 0, got {value}")
        if not (self.calls_shape > 0 and self.max_calls >= 0):
            raise ConfigError(f"agentic calls_shape must be > 0 and max_calls >= 0, got {self}")
        if self.kv not in KV_MODES:
            raise ConfigError(f"unknown --kv {self.kv!r}; valid: {', '.join(KV_MODES)}")
        if not self.latency or abs(sum(c.share for c in self.latency) - 1.0) > 1e-6:
            raise ConfigError("agentic latency class shares must add up to 1")
        if self.timeout_s <= 0 or self.max_context_tokens < 2:
            raise ConfigError("agentic timeout_s must be > 0 and max_context_tokens >= 2")

    @property
    def max_tokens(self) -> int:
        """The longest a sample's generated tokens can be (every turn at its cap)."""
        return (self.max_calls + 1) * self.turn_max_tokens

    def mean_calls(self, progress: float) -> float:
        p = min(1.0, max(0.0, progress))
        return self.calls_start + (self.calls_end - self.calls_start) * p

    def draw_calls(self, rng: np.random.Generator, groups: int, n: int, progress: float) -> IntArray:
        """Tool calls per sample, (groups * n,) in group order: Poisson around a prompt's rate."""
        mean = self.mean_calls(progress)
        rate = rng.gamma(self.calls_shape, mean / self.calls_shape, size=(groups, 1)) if mean > 0 else None
        calls = rng.poisson(np.broadcast_to(rate, (groups, n))) if rate is not None else np.zeros((groups, n))
        return np.minimum(calls, self.max_calls).astype(np.int64).ravel()

    def draw_turns(self, rng: np.random.Generator, size: int) -> FloatArray:
        return _lognormal(rng, size, self.turn_median_tokens, self.turn_sigma, self.turn_max_tokens)

    def draw_outputs(self, rng: np.random.Generator, size: int) -> FloatArray:
        return _lognormal(rng, size, self.output_median_tokens, self.output_sigma, self.output_max_tokens)

    def draw_pauses(self, rng: np.random.Generator, size: int) -> FloatArray:
        """Environment latency of `size` tool calls (seconds), capped at the timeout."""
        shares = np.array([c.share for c in self.latency])
        kind = rng.choice(len(self.latency), size=size, p=shares / shares.sum())
        medians = np.array([c.median_s for c in self.latency])[kind]
        sigmas = np.array([c.sigma for c in self.latency])[kind]
        pauses: FloatArray = np.minimum(medians * np.exp(sigmas * rng.standard_normal(size)), self.timeout_s)
        return pauses

    def median(self, progress: float) -> float:
        """Median generated tokens of a sample, roughly (turns x the median turn)."""
        return (1.0 + self.mean_calls(progress)) * self.turn_median_tokens


Workload = LengthModel | AgenticWorkload


@dataclass(frozen=True)
class WorkloadPreset:
    """A named workload: what it models, its lengths or episodes, and its prompt length."""

    name: str
    summary: str
    build: Callable[[], Workload]
    prompt_tokens: int


SWE = AgenticWorkload(
    calls_start=8.0,
    calls_end=24.0,
    calls_shape=3.0,
    max_calls=48,
    turn_median_tokens=160.0,
    turn_sigma=0.8,
    turn_max_tokens=2048,
    output_median_tokens=384.0,
    output_sigma=1.1,
    output_max_tokens=8192,
    latency=(LatencyClass(0.50, 0.3, 0.8), LatencyClass(0.45, 3.0, 0.9), LatencyClass(0.05, 25.0, 0.5)),
    timeout_s=120.0,
    max_context_tokens=65536,
)

WORKLOADS: dict[str, WorkloadPreset] = {
    p.name: p
    for p in (
        WorkloadPreset(
            "rlvr",
            "single-turn reasoning: median 1,024 tokens growing 3x, max 8,192, 512-token prompts",
            lambda: LogNormalLengths(1024.0, max_tokens=8192, drift=3.0),
            512,
        ),
        WorkloadPreset(
            "long-prompt",
            "single-turn, 4,096-token prompts, median 256 tokens growing 16x, max 32,768",
            lambda: LogNormalLengths(256.0, max_tokens=32768, drift=16.0),
            4096,
        ),
        WorkloadPreset(
            "agentic",
            "tool-using agent: 1 -> 3.5 calls per episode (search, code, slow tools), KV kept",
            AgenticWorkload,
            1024,
        ),
        WorkloadPreset(
            "agentic-swe",
            "long-horizon coding agent: 8 -> 24 calls (file ops, commands, test suites), KV kept",
            lambda: SWE,
            2048,
        ),
    )
}
