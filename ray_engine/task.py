"""The toy RL tasks of the Ray engine: sort a digit sequence, with a verifiable reward.

`sort`: the policy writes the sorted copy of a prompt of 2 to 24 digits, one digit per
decode step; the reward is the share of positions right. Prompt lengths are heavy-tailed
(most short, a few long), which gives rollout the long-tail behaviour of real LLM responses.

`tools`: the same answer written in turns of `TURN_TOKENS` digits; after each turn but the
last the episode calls a checker tool and pauses until the simulated environment answers
(log-normal latency, median 80 ms, capped at 1.5 s: the toy's scale of "tens of ms to tens
of seconds" against its 10 ms decode steps). The tool's answer, the share of the turn's
digits that were right, is an input of every later step. While it waits, a sequence keeps
its slot (its KV cache stays), so waiting episodes take rollout capacity.

The policy is a small autoregressive MLP; training is a group-relative policy gradient
(GRPO-style per-token advantages against the group mean).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = [
    "DECODE_STEP_S",
    "MAX_DIGITS",
    "PREFILL_TOKEN_S",
    "TASKS",
    "TOOL_MEDIAN_S",
    "TRAIN_TOKEN_S",
    "TURN_TOKENS",
    "expected_wait_s",
    "group_loss",
    "make_policy_model",
    "prompt_lengths",
    "score",
    "step_features",
    "tool_latency_s",
]

TASKS = ("sort", "tools")
MAX_DIGITS = 24
# Each decode step and each trained token also waits this long, standing in for an
# accelerator's latency, so measured throughput reflects scheduling (tails, overlap,
# switches) rather than the two CPU cores of the development machine.
DECODE_STEP_S = 0.01  # one decode step of a worker's whole running batch
TRAIN_TOKEN_S = 0.00025  # one trained token
PREFILL_TOKEN_S = DECODE_STEP_S / 8  # recomputing one token of a migrated sequence's context
TURN_TOKENS = 2  # digits per turn of the `tools` task
TOOL_MEDIAN_S, TOOL_SIGMA, TOOL_CAP_S = 0.08, 1.0, 1.5
_FEATURES = 10 + 11 + MAX_DIGITS + 1 + 1 + 1  # digit counts, previous token, position, progress, feedback


def prompt_lengths(rng: np.random.Generator, k: int) -> list[int]:
    """Heavy-tailed lengths in [2, MAX_DIGITS]: median 4, p90 about 16, a few at the cap."""
    raw = 2 + rng.pareto(1.3, size=k) * 3
    return [int(min(MAX_DIGITS, x)) for x in raw]


def expected_wait_s(rng: np.random.Generator, task: str, samples: int = 1000) -> float:
    """Seconds an episode of the prompt set waits for tools, on average (0 for `sort`): the
    task's profile, as the prompt lengths stand in for lengths measured in earlier steps."""
    if task != "tools":
        return 0.0
    calls = [math.ceil(n / TURN_TOKENS) - 1 for n in prompt_lengths(rng, samples)]
    return float(np.mean([sum(tool_latency_s(rng) for _ in range(c)) for c in calls]))


def tool_latency_s(rng: np.random.Generator) -> float:
    """One checker call's latency: log-normal around 80 ms, a heavy tail, cut at 1.5 s."""
    return float(min(TOOL_CAP_S, TOOL_MEDIAN_S * math.exp(TOOL_SIGMA * rng.standard_normal())))


def step_features(digits: Any, prev: Any, pos: int, length: int, feedback: Any) -> Any:
    """Input of one decode step for a group's n samples: what the prompt holds (digit
    counts), the previous token, the position (one-hot), the share of the answer written and
    the last tool answer (0 before the first, and always for the single-turn task)."""
    n = prev.shape[0]
    counts = torch.bincount(digits, minlength=10).float().repeat(n, 1) / MAX_DIGITS
    prev_onehot = torch.nn.functional.one_hot(prev, 11).float()
    pos_onehot = torch.zeros(n, MAX_DIGITS + 1)
    pos_onehot[:, pos] = 1.0
    progress = torch.full((n, 1), pos / max(1, length))
    return torch.cat([counts, prev_onehot, pos_onehot, progress, feedback.reshape(n, 1)], dim=1)


def make_policy_model() -> Any:
    """The policy: an MLP from one step's features to logits over the 10 digits."""
    return torch.nn.Sequential(
        torch.nn.Linear(_FEATURES, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def score(digits: Any, tokens: Any) -> Any:
    """Verifiable reward per position: 1 where the answer matches the sorted prompt."""
    return (tokens == torch.sort(digits).values).float()


def group_loss(model: Any, group: dict[str, Any]) -> tuple[Any, int]:
    """Policy-gradient loss of one group (summed over its tokens) and its token count.

    The advantage of a token is its reward minus the mean reward of the group's samples at
    the same position, so the group itself is the baseline (no value network). The tool
    answers each step saw are replayed from the group (`feedback`, one per position).
    """
    digits = torch.as_tensor(group["prompt"])
    tokens = torch.as_tensor(group["tokens"])
    correct = torch.as_tensor(group["correct"])
    feedback = torch.as_tensor(group["feedback"])
    advantage = correct - correct.mean(dim=0, keepdim=True)
    n, length = tokens.shape
    prev = torch.full((n,), 10)
    loss = torch.zeros(())
    for pos in range(length):
        logp = torch.log_softmax(model(step_features(digits, prev, pos, length, feedback[:, pos])), dim=1)
        loss = loss - (advantage[:, pos] * logp.gather(1, tokens[:, pos : pos + 1]).squeeze(1)).sum()
        prev = tokens[:, pos]
    return loss, n * length
