"""The Ray actors of the real engine: role-switching workers and the experience queue.

The class factories take the `ray` and `torch` modules from their caller: the engine
(dartfl/datacenter/ray_engine.py) is the one module that imports them, so importing this
one costs neither. Results cross the actor boundary as the small dataclasses below.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SLOTS", "SWITCH_S", "ShardResult", "SliceResult", "queue_class", "worker_class"]

SWITCH_S = 0.3  # dead time of a role switch (reload weights, build the other side's state)
SLOTS = 12  # sequences one rollout worker decodes at once (its KV-cache budget)


@dataclass(frozen=True)
class SliceResult:
    """What one rollout slice produced and what the worker still holds."""

    groups: list[dict[str, Any]]  # finished groups, each with its version tag
    active: int  # sequences still in flight on the worker
    unused_grant: int  # admissions granted for the slice that found no free slot
    steps: int  # decode steps run
    busy_s: float  # time the worker spent decoding


@dataclass(frozen=True)
class ShardResult:
    """Gradients of one data-parallel shard of a training batch."""

    grads: list[np.ndarray]
    tokens: int
    busy_s: float


def worker_class(ray: Any, torch: Any) -> Any:
    """The worker actor class, built on first use from the engine's `ray` and `torch`."""
    from dartfl.datacenter.ray_task import (
        DECODE_STEP_S,
        TRAIN_TOKEN_S,
        group_loss,
        make_policy_model,
        prompt_lengths,
        score,
        step_features,
    )

    @ray.remote
    class Worker:
        """A long-lived actor that rolls out or computes gradients, as the driver asks.

        It holds a copy of the policy and, while it rolls out, the sequences in flight.
        """

        def __init__(self, seed: int, group_size: int) -> None:
            torch.set_num_threads(1)
            torch.manual_seed(seed)
            self.model = make_policy_model(torch)
            self.version = -1
            self.group_size = group_size
            self.rng = np.random.default_rng(seed)
            self.active: list[dict[str, Any]] = []

        def warm_up(self) -> tuple[float, float]:
            """Profile one decode step of a full batch and one trained token, warming the
            process up on the way. Runs before the clock starts, for every policy alike.

            It draws from its own generator, so every policy sees the same prompt stream.
            """
            rng = np.random.default_rng(0)
            self.active = [self._sequence(rng, 8, -1) for _ in range(SLOTS)]
            start = time.perf_counter()
            done: list[dict[str, Any]] = []
            with torch.no_grad():
                while self.active:
                    done += self._decode_step()
            decode_step_s = (time.perf_counter() - start) / 8
            shard = self.gradients(None, -1, done[:2])
            return decode_step_s, shard.busy_s / shard.tokens

        def set_role(self, role: str) -> list[dict[str, Any]]:
            """Pay the switch's dead time; hand back the sequences in flight, which the
            driver resumes on the remaining rollout workers instead of throwing them away."""
            time.sleep(SWITCH_S)
            leaving, self.active = self.active, []
            return leaving

        def run_steps(
            self, weights: Any, version: int, grant: int, adopted: list[dict[str, Any]], steps: int
        ) -> SliceResult:
            """Continuous batching for up to `steps` decode steps (fewer once nothing is left).

            A slot that frees up mid-slice takes a new prompt at once, up to `grant` new
            prompts in all (the driver's share of the admission bound). In-flight sequences
            persist between calls; new weights load at once and the sequences continue under
            them, keeping the tag of the version they started with.
            """
            start = time.perf_counter()
            self._load(weights, version)
            self.active += adopted
            done: list[dict[str, Any]] = []
            ran = 0
            with torch.no_grad():
                while ran < steps:
                    admit = min(grant, SLOTS - len(self.active))
                    if admit > 0:
                        grant -= admit
                        self.active += [
                            self._sequence(self.rng, n, version) for n in prompt_lengths(self.rng, admit)
                        ]
                    if not self.active:
                        break
                    done += self._decode_step()
                    ran += 1
            return SliceResult(done, len(self.active), grant, ran, time.perf_counter() - start)

        def gradients(self, weights: Any, version: int, groups: list[dict[str, Any]]) -> ShardResult:
            """Gradients of the policy-gradient loss on one shard, averaged over its tokens."""
            start = time.perf_counter()
            self._load(weights, version)
            self.model.zero_grad()
            loss = torch.zeros(())
            tokens = 0
            for group in groups:
                group_sum, group_tokens = group_loss(torch, self.model, group)
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

        def _sequence(self, rng: np.random.Generator, length: int, version: int) -> dict[str, Any]:
            return {
                "digits": torch.as_tensor(rng.integers(0, 10, size=length)),
                "prev": torch.full((self.group_size,), 10),
                "tokens": torch.zeros(self.group_size, length, dtype=torch.long),
                "pos": 0,
                "version": version,
            }

        def _decode_step(self) -> list[dict[str, Any]]:
            """One decode step of every sequence in flight; returns the groups it finished."""
            for seq in self.active:
                length = seq["tokens"].shape[1]
                logits = self.model(step_features(torch, seq["digits"], seq["prev"], seq["pos"], length))
                seq["prev"] = torch.multinomial(torch.softmax(logits, dim=1), 1).squeeze(1)
                seq["tokens"][:, seq["pos"]] = seq["prev"]
                seq["pos"] += 1
            time.sleep(DECODE_STEP_S)
            finished = [q for q in self.active if q["pos"] == q["tokens"].shape[1]]
            self.active = [q for q in self.active if q["pos"] < q["tokens"].shape[1]]
            groups = []
            for seq in finished:
                correct = score(torch, seq["digits"], seq["tokens"])
                groups.append(
                    {
                        "prompt": seq["digits"].numpy(),
                        "tokens": seq["tokens"].numpy(),
                        "correct": correct.numpy(),
                        "reward": correct.mean(dim=1).numpy(),
                        "version": seq["version"],
                    }
                )
            return groups

    return Worker


def queue_class(ray: Any) -> Any:
    """The experience-queue actor class, built on first use from the engine's `ray`."""

    @ray.remote(num_cpus=0)
    class ExperienceQueue:
        """Finished groups with their version tags. Applies AReaL's admission rule and hands
        the trainer the oldest groups, dropping those already past the staleness bound."""

        def __init__(self, batch: int, eta: int) -> None:
            self.batch, self.eta = batch, eta
            self.groups: list[dict[str, Any]] = []
            self.accepted = 0
            self.dropped = 0

        def capacity(self, version: int, running: int) -> tuple[int, int, int]:
            """(admissions left, groups buffered, groups dropped so far).

            AReaL's rule: (eta + version + 1) * batch - (accepted + running).
            """
            left = (self.eta + version + 1) * self.batch - (self.accepted + running)
            return left, len(self.groups), self.dropped

        def put(self, groups: list[dict[str, Any]]) -> None:
            self.groups.extend(groups)
            self.accepted += len(groups)

        def take(self, version: int) -> list[dict[str, Any]] | None:
            """The oldest `batch` groups within the bound, or None while too few are ready."""
            keep = [g for g in self.groups if version - g["version"] <= self.eta]
            stale = len(self.groups) - len(keep)
            self.dropped += stale
            self.accepted -= stale  # a dropped group frees its admission
            self.groups = keep
            if len(self.groups) < self.batch:
                return None
            self.groups.sort(key=lambda g: g["version"])
            batch, self.groups = self.groups[: self.batch], self.groups[self.batch :]
            return batch

    return ExperienceQueue
