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
from dartfl.protocol.device import MAX_COUNT, MAX_TASKS
from dartfl.protocol.jsonwire import short
from fltask.config import MAX_DEADLINE_S

__all__ = ["MAX_DEADLINE_S", "RoundOrder", "RoundResult"]

# MAX_DEADLINE_S (fltask.config): a day; no federated round trains longer, and the agent's
# waits stay times the OS can keep.
MAX_NAME_CHARS = 256  # a task, policy or loss-weighting name


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
        """Every field checked for its type and range before the agent acts on any (a key
        this version does not know is ignored); a bad one raises ConfigError naming it."""
        tasks = meta.get("tasks")
        if tasks is not None and not (
            isinstance(tasks, list) and 0 < len(tasks) <= MAX_TASKS and all(_is_name(t) for t in tasks)
        ):
            raise _bad("tasks", f"a list of task names (1 to {MAX_TASKS} of them)", tasks)
        policy, weighting = meta.get("policy"), meta.get("loss-weighting")
        for key, value in (("policy", policy), ("loss-weighting", weighting)):
            if value is not None and not _is_name(value):
                raise _bad(key, f"a string of 1 to {MAX_NAME_CHARS} characters", value)
        lr = _number(meta, "learning-rate", "a number > 0 and finite", math.inf)
        return cls(
            server_round=_count(meta, "server-round", 0),
            deadline_s=_number(
                meta, "round-deadline-s", f"> 0 and <= {MAX_DEADLINE_S:.0f} s", MAX_DEADLINE_S
            ),
            target_samples=_count(meta, "round-target-samples", 0) or 0,
            tasks=None if tasks is None else tuple(tasks),
            policy=policy,
            loss_weighting=weighting,
            learning_rate=lr,
            step_samples=_count(meta, "step-samples", 1),
        )


def _bad(key: str, expected: str, value: object) -> ConfigError:
    return ConfigError(f"bad round metadata: {key} must be {expected}, got {short(value)}")


def _is_name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS


def _count(meta: Mapping[str, Any], key: str, least: int) -> int | None:
    """An integer field in [least, MAX_COUNT) (telemetry's bound on counts), or None if unsaid."""
    value = meta.get(key)
    if value is not None and not (type(value) is int and least <= value < MAX_COUNT):
        raise _bad(key, f"an integer >= {least} and < 2**53", value)
    return value


def _number(meta: Mapping[str, Any], key: str, expected: str, most: float) -> float | None:
    """A finite number field in (0, most], or None if unsaid."""
    value = meta.get(key)
    number = type(value) is float or (type(value) is int and value < MAX_COUNT)  # no 400-digit int
    if value is not None and not (number and 0 < value <= most and math.isfinite(value)):
        raise _bad(key, expected, value)
    return None if value is None else float(value)


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
