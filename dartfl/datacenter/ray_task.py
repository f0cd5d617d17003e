"""The toy RL task of the Ray engine: sort a digit sequence, with a verifiable reward.

The policy writes the sorted copy of a prompt of 2 to 24 digits, one digit per decode step;
the reward is the share of positions right. Prompt lengths are heavy-tailed (most short, a
few long), which gives rollout the long-tail behaviour of real LLM responses. The policy is
a small autoregressive MLP; training is a group-relative policy gradient (GRPO-style
per-token advantages against the group mean).

Every function takes the `torch` module as an argument: this module imports only numpy, so
the core stays importable without PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "DECODE_STEP_S",
    "MAX_DIGITS",
    "TRAIN_TOKEN_S",
    "group_loss",
    "make_policy_model",
    "prompt_lengths",
    "score",
    "step_features",
]

MAX_DIGITS = 24
# Each decode step and each trained token also waits this long, standing in for an
# accelerator's latency, so measured throughput reflects scheduling (tails, overlap,
# switches) rather than the two CPU cores of the development machine.
DECODE_STEP_S = 0.01  # one decode step of a worker's whole running batch
TRAIN_TOKEN_S = 0.00025  # one trained token
_FEATURES = 10 + 11 + MAX_DIGITS + 1 + 1  # digit counts, previous token, position, progress


def prompt_lengths(rng: np.random.Generator, k: int) -> list[int]:
    """Heavy-tailed lengths in [2, MAX_DIGITS]: median 4, p90 about 16, a few at the cap."""
    raw = 2 + rng.pareto(1.3, size=k) * 3
    return [int(min(MAX_DIGITS, x)) for x in raw]


def step_features(torch: Any, digits: Any, prev: Any, pos: int, length: int) -> Any:
    """Input of one decode step for a group's n samples: what the prompt holds (digit
    counts), the previous token, the position (one-hot) and the share of the answer written."""
    n = prev.shape[0]
    counts = torch.bincount(digits, minlength=10).float().repeat(n, 1) / MAX_DIGITS
    prev_onehot = torch.nn.functional.one_hot(prev, 11).float()
    pos_onehot = torch.zeros(n, MAX_DIGITS + 1)
    pos_onehot[:, pos] = 1.0
    progress = torch.full((n, 1), pos / max(1, length))
    return torch.cat([counts, prev_onehot, pos_onehot, progress], dim=1)


def make_policy_model(torch: Any) -> Any:
    """The policy: an MLP from one step's features to logits over the 10 digits."""
    return torch.nn.Sequential(
        torch.nn.Linear(_FEATURES, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def score(torch: Any, digits: Any, tokens: Any) -> Any:
    """Verifiable reward per position: 1 where the answer matches the sorted prompt."""
    return (tokens == torch.sort(digits).values).float()


def group_loss(torch: Any, model: Any, group: dict[str, Any]) -> tuple[Any, int]:
    """Policy-gradient loss of one group (summed over its tokens) and its token count.

    The advantage of a token is its reward minus the mean reward of the group's samples at
    the same position, so the group itself is the baseline (no value network).
    """
    digits = torch.as_tensor(group["prompt"])
    tokens = torch.as_tensor(group["tokens"])
    correct = torch.as_tensor(group["correct"])
    advantage = correct - correct.mean(dim=0, keepdim=True)
    n, length = tokens.shape
    prev = torch.full((n,), 10)
    loss = torch.zeros(())
    for pos in range(length):
        logp = torch.log_softmax(model(step_features(torch, digits, prev, pos, length)), dim=1)
        loss = loss - (advantage[:, pos] * logp.gather(1, tokens[:, pos : pos + 1]).squeeze(1)).sum()
        prev = tokens[:, pos]
    return loss, n * length
