"""The two messages of the round channel, typed: what the ClientApp orders, what the agent returns.

A `RoundOrder` goes from the ClientApp to the agent with the global weights; a `RoundResult`
comes back with the trained ones (edge_client/round_channel.py carries both as a JSON header
in front of an .npz archive). Each has one codec: `to_json` and `from_json`, which checks
every field and raises one error naming the field (`ConfigError` for an order, which the
agent refuses with HTTP 400; `ProtocolError("bad-reply")` for a result the ClientApp cannot
use). The JSON keys are the Flower run config's spelling (`round-deadline-s`...), so the
channel's wire format is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dartfl.errors import ConfigError, ProtocolError

__all__ = ["RoundOrder", "RoundResult"]


@dataclass(frozen=True)
class RoundOrder:
    """One federated round as the ClientApp asks the agent to run it.

    None means "not said": the agent keeps its own deadline, tasks, policy, loss weighting,
    learning rate and optimizer step."""

    server_round: int | None = None
    deadline_s: float | None = None  # how long to train
    target_samples: int = 0  # samples owed by the deadline (0: no deadline pressure)
    tasks: tuple[str, ...] | None = None
    policy: str | None = None
    loss_weighting: str | None = None
    learning_rate: float | None = None
    step_samples: int | None = None  # samples per optimizer step

    def to_json(self) -> dict[str, Any]:
        pairs = {
            "server-round": self.server_round,
            "round-deadline-s": self.deadline_s,
            "round-target-samples": self.target_samples,
            "tasks": None if self.tasks is None else list(self.tasks),
            "policy": self.policy,
            "loss-weighting": self.loss_weighting,
            "learning-rate": self.learning_rate,
            "step-samples": self.step_samples,
        }
        return {key: value for key, value in pairs.items() if value is not None}

    @classmethod
    def from_json(cls, meta: Mapping[str, Any]) -> RoundOrder:
        try:
            deadline = meta.get("round-deadline-s")
            deadline_s = None if deadline is None else float(deadline)
            target = int(meta.get("round-target-samples", 0))
            server_round = meta.get("server-round")
            server_round = None if server_round is None else int(server_round)
        except (TypeError, ValueError):
            raise ConfigError(f"bad round metadata: {dict(meta)}") from None
        if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s > 0):
            raise ConfigError(f"round-deadline-s must be > 0, got {deadline_s}")
        lr = meta.get("learning-rate")
        if lr is not None and not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
            raise ConfigError(f"learning-rate must be a number > 0, got {lr!r}")
        step = meta.get("step-samples")
        if step is not None and not (isinstance(step, int) and not isinstance(step, bool) and step >= 1):
            raise ConfigError(f"step-samples must be an integer >= 1, got {step!r}")
        tasks = meta.get("tasks")
        if tasks is not None and not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
            raise ConfigError(f"tasks must be a list of task names, got {tasks!r}")
        policy, weighting = meta.get("policy"), meta.get("loss-weighting")
        for key, value in (("policy", policy), ("loss-weighting", weighting)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{key} must be a string, got {value!r}")
        return cls(
            server_round=server_round,
            deadline_s=deadline_s,
            target_samples=target,
            tasks=None if tasks is None else tuple(tasks),
            policy=policy,
            loss_weighting=weighting,
            learning_rate=None if lr is None else float(lr),
            step_samples=step,
        )


@dataclass(frozen=True)
class RoundResult:
    """The agent's answer to a round: who trained, how many samples per task, the metrics
    (edge_client/agent_rounds.py `round_metrics`)."""

    device: str
    samples: Mapping[str, int]
    metrics: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "samples": dict(self.samples), "metrics": dict(self.metrics)}

    @classmethod
    def from_json(cls, reply: Mapping[str, Any]) -> RoundResult:
        samples, metrics = reply.get("samples"), reply.get("metrics")
        if not isinstance(samples, dict) or not isinstance(metrics, dict):
            keys = sorted(reply)
            raise ProtocolError("bad-reply", f"the agent's round reply lacks samples or metrics: {keys}")
        try:
            return cls(
                device=str(reply.get("device", "")),
                samples={str(t): int(n) for t, n in samples.items()},
                metrics={str(k): float(v) for k, v in metrics.items()},
            )
        except (TypeError, ValueError) as exc:
            problem = f"the agent's round reply has a count that is not a number: {exc}"
            raise ProtocolError("bad-reply", problem) from None
