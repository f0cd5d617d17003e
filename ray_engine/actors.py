"""The Ray actors of the real engine: role-switching workers and the experience queue.

Results cross the actor boundary as the small dataclasses below.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch

from ray_engine.task import (
    DECODE_STEP_S,
    PREFILL_TOKEN_S,
    TRAIN_TOKEN_S,
    TURN_TOKENS,
    group_loss,
    make_policy_model,
    prompt_lengths,
    score,
    step_features,
    tool_latency_s,
)

__all__ = ["SLOTS", "SWITCH_S", "ExperienceQueue", "ShardResult", "SliceResult", "Worker"]

SWITCH_S = 0.3  # dead time of a role switch (reload weights, build the other side's state)
SLOTS = 12  # sequences one rollout worker holds at once (its KV-cache budget)


@dataclass(frozen=True)
class SliceResult:
    """What one rollout slice produced and what the worker still holds."""

    groups: list[dict[str, Any]]  # finished groups, each with its version tag
    active: int  # sequences still in flight on the worker (waiting for a tool included)
    unused_grant: int  # admissions granted for the slice that found no free slot
    steps: int  # decode steps run (idle steps while every sequence waits included)
    busy_s: float  # time the worker spent decoding (and recomputing adopted contexts)
    recompute_s: float  # of busy_s, recomputing the contexts of adopted (migrated) sequences


@dataclass(frozen=True)
class ShardResult:
    """Gradients of one data-parallel shard of a training batch."""

    grads: list[np.ndarray]
    tokens: int
    busy_s: float


@ray.remote
class Worker:
    """A long-lived actor that rolls out or computes gradients, as the driver asks.

    It holds a copy of the policy and, while it rolls out, the sequences in flight (a
    sequence is one prompt's group of n samples, decoded together).
    """

    def __init__(self, seed: int, group_size: int, task: str = "sort") -> None:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.model = make_policy_model()
        self.version = -1
        self.group_size = group_size
        self.multi_turn = task == "tools"
        self.rng = np.random.default_rng(seed)
        self.active: list[dict[str, Any]] = []

    def warm_up(self) -> tuple[float, float]:
        """Profile one decode step of a full batch and one trained token, warming the
        process up on the way. Runs before the clock starts, for every policy alike.

        It draws from its own generator, so every policy sees the same prompt stream.
        """
        rng = np.random.default_rng(0)
        self.active = [self._sequence(rng, 8, tools=False) for _ in range(SLOTS)]
        start = time.perf_counter()
        done: list[dict[str, Any]] = []
        with torch.no_grad():
            while self.active:
                done += self._decode_step()
        decode_step_s = (time.perf_counter() - start) / 8
        shard = self.gradients(None, -1, done[:2])
        return decode_step_s, shard.busy_s / shard.tokens

    def set_role(self, role: str, dead_s: float = SWITCH_S) -> list[dict[str, Any]]:
        """Pay the switch's dead time; hand back the sequences in flight, which the
        driver resumes on the remaining rollout workers instead of throwing them away."""
        time.sleep(dead_s)
        leaving, self.active = self.active, []
        return leaving

    def run_steps(
        self, weights: Any, version: int, grant: int, adopted: list[dict[str, Any]], steps: int
    ) -> SliceResult:
        """Continuous batching for up to `steps` decode steps (fewer once nothing is left).

        A slot that frees up mid-slice takes a new prompt at once, up to `grant` new
        prompts in all (the driver's share of the admission bound). In-flight sequences
        persist between calls; new weights load at once and the sequences continue under
        them. A finished group is tagged with the version that decoded its last token: its
        staleness is AReaL's tail staleness (the simulator's `interrupt` mode,
        docs/datacenter.md), so an episode that pauses across weight updates is not dropped
        for the age of its first turn. Adopted sequences (from a worker that left rollout)
        first have their context recomputed. A step in which every sequence waits for its
        tool is an idle step: the worker sleeps it out.
        """
        self._load(weights, version)
        recompute_s = PREFILL_TOKEN_S * sum(len(s["digits"]) + s["pos"] for s in adopted)
        if recompute_s:
            time.sleep(recompute_s)
        self.active += adopted
        done: list[dict[str, Any]] = []
        ran, busy = 0, recompute_s
        with torch.no_grad():
            while ran < steps:
                admit = min(grant, SLOTS - len(self.active))
                if admit > 0:
                    grant -= admit
                    self.active += [
                        self._sequence(self.rng, n, tools=self.multi_turn)
                        for n in prompt_lengths(self.rng, admit)
                    ]
                if not self.active:
                    break
                now = time.perf_counter()
                if all(s["wake"] > now for s in self.active):
                    time.sleep(min(DECODE_STEP_S, min(s["wake"] for s in self.active) - now))
                else:
                    step_start = time.perf_counter()
                    done += self._decode_step()
                    busy += time.perf_counter() - step_start
                ran += 1
        return SliceResult(done, len(self.active), grant, ran, busy, recompute_s)

    def gradients(self, weights: Any, version: int, groups: list[dict[str, Any]]) -> ShardResult:
        """Gradients of the policy-gradient loss on one shard, averaged over its tokens."""
        start = time.perf_counter()
        self._load(weights, version)
        self.model.zero_grad()
        loss = torch.zeros(())
        tokens = 0
        for group in groups:
            group_sum, group_tokens = group_loss(self.model, group)
            loss = loss + group_sum
            tokens += group_tokens
        torch.autograd.backward(loss / max(1, tokens))
        time.sleep(TRAIN_TOKEN_S * tokens)
        grads = [p.grad.detach().numpy().copy() for p in self.model.parameters()]
        return ShardResult(grads, tokens, time.perf_counter() - start)

    def _load(self, weights: Any, version: int) -> None:
        if weights is not None and version != self.version:
            self.model.load_state_dict(weights)
            self.version = version

    def _sequence(self, rng: np.random.Generator, length: int, *, tools: bool) -> dict[str, Any]:
        n = self.group_size
        return {
            "digits": torch.as_tensor(rng.integers(0, 10, size=length)),
            "prev": torch.full((n,), 10),
            "tokens": torch.zeros(n, length, dtype=torch.long),
            "feedback": torch.zeros(n, length),
            "last": torch.zeros(n),  # the last tool answer, an input of every later step
            "pos": 0,
            "tools": tools,
            "wake": 0.0,  # waits for its tool until then (perf_counter seconds)
            "wait_s": 0.0,
        }

    def _decode_step(self) -> list[dict[str, Any]]:
        """One decode step of every sequence not waiting for a tool; returns finished groups."""
        now = time.perf_counter()
        awake = [s for s in self.active if s["wake"] <= now]
        for seq in awake:
            length = seq["tokens"].shape[1]
            pos = seq["pos"]
            seq["feedback"][:, pos] = seq["last"]
            x = step_features(seq["digits"], seq["prev"], pos, length, seq["last"])
            seq["prev"] = torch.multinomial(torch.softmax(self.model(x), dim=1), 1).squeeze(1)
            seq["tokens"][:, pos] = seq["prev"]
            seq["pos"] = pos + 1
        time.sleep(DECODE_STEP_S)
        end = time.perf_counter()
        for seq in awake:
            pos, length = seq["pos"], seq["tokens"].shape[1]
            if seq["tools"] and pos < length and pos % TURN_TOKENS == 0:
                # the turn is over: call the checker, which answers after its latency
                target = torch.sort(seq["digits"]).values[pos - TURN_TOKENS : pos]
                seq["last"] = (seq["tokens"][:, pos - TURN_TOKENS : pos] == target).float().mean(dim=1)
                latency = tool_latency_s(self.rng)
                seq["wake"], seq["wait_s"] = end + latency, seq["wait_s"] + latency
        finished = [q for q in self.active if q["pos"] == q["tokens"].shape[1]]
        self.active = [q for q in self.active if q["pos"] < q["tokens"].shape[1]]
        groups = []
        for seq in finished:
            correct = score(seq["digits"], seq["tokens"])
            groups.append(
                {
                    "prompt": seq["digits"].numpy(),
                    "tokens": seq["tokens"].numpy(),
                    "feedback": seq["feedback"].numpy(),
                    "correct": correct.numpy(),
                    "reward": correct.mean(dim=1).numpy(),
                    "version": self.version,  # the weights that decoded its last token
                    "wait_s": seq["wait_s"],
                }
            )
        return groups


@ray.remote(num_cpus=0)
class ExperienceQueue:
    """Finished groups with their version tags. Applies AReaL's admission rule and hands
    the trainer the oldest groups, dropping those already past the staleness bound."""

    def __init__(self, batch: int, eta: int) -> None:
        self.batch, self.eta = batch, eta
        self.groups: list[dict[str, Any]] = []
        self.accepted = 0
        self.dropped = 0

    def capacity(self, version: int, running: int) -> tuple[int, int, int, int]:
        """(admissions left, groups buffered, groups dropped so far, groups sampleable at
        `version`). AReaL's rule: (eta + version + 1) * batch - (accepted + running).
        Groups past the bound are dropped first: kept, they would hold admissions while a lent
        trainer (verl-dynamic) takes nothing and waits for a threshold they keep it from."""
        self._drop_stale(version)
        left = (self.eta + version + 1) * self.batch - (self.accepted + running)
        return left, len(self.groups), self.dropped, len(self.groups)

    def put(self, groups: list[dict[str, Any]]) -> None:
        self.groups.extend(groups)
        self.accepted += len(groups)

    def take(self, version: int) -> list[dict[str, Any]] | None:
        """The oldest `batch` groups within the bound, or None while too few are ready."""
        self._drop_stale(version)
        if len(self.groups) < self.batch:
            return None
        self.groups.sort(key=lambda g: g["version"])
        batch, self.groups = self.groups[: self.batch], self.groups[self.batch :]
        return batch

    def _drop_stale(self, version: int) -> None:
        keep = [g for g in self.groups if version - g["version"] <= self.eta]
        stale = len(self.groups) - len(keep)
        self.dropped += stale
        self.accepted -= stale  # a dropped group frees its admission
        self.groups = keep
