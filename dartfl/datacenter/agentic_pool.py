"""In-flight agentic episodes on the rollout engines, one row per sample.

Decoding shares one token clock V with the single-turn pool (dartfl/datacenter/rollout.py):
continuous batching moves every decoding sequence one token per step, so a turn of L tokens
started at V0 ends at V0 + prefill + L. A finished turn starts a tool call that ends at a
wall-clock time; the episode then reads the tool's output and starts its next turn. Both
events are found per advance with vectorised masks, and their times are interpolated inside
the advance, so a 50 ms tool call is not rounded up to the simulator's 1 s tick.

Prefill (the prompt, each tool output, and with evicted KV the whole context again) costs the
engines time: it is owed as engine-seconds and paid before decoding in each advance, as
chunked prefill takes its share of every step. The sequence itself also waits its own
prefill, counted in decode steps as in the single-turn pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dartfl.datacenter.model import ModelSpec
from dartfl.datacenter.workload import AgenticWorkload

__all__ = ["DECODING", "PAUSED", "WAITING", "AgenticPool", "Finished"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
DECODING, PAUSED, WAITING = 0, 1, 2  # WAITING: an evicted episode whose tool returned, without memory yet
_FIELDS = (
    "grp",
    "phase",
    "fin",
    "wake",
    "calls",
    "ctx",
    "turn",
    "gen",
    "out",
    "pend",
    "wait",
    "pref",
    "t0",
    "cgen",
)
_BOOKS = 6  # per group: generated, output, wait, prefill tokens, context x generated, sample seconds


@dataclass(frozen=True, slots=True)
class Finished:
    """Groups of one version that finished in an advance, and what their samples did (sums).

    `context_x_tokens` / `tokens` is the context a decode step of theirs read on average;
    `sample_s` / (n x `makespan_s`) is the share of a group's life a sample was in flight."""

    groups: int
    tokens: float
    extra_tokens: float = 0.0
    wait_s: float = 0.0
    prefill_tokens: float = 0.0
    context_x_tokens: float = 0.0
    sample_s: float = 0.0
    makespan_s: float = 0.0


class AgenticPool:
    def __init__(
        self, workload: AgenticWorkload, model: ModelSpec, prompt_tokens: int, group_size: int
    ) -> None:
        self.w, self.m, self.prompt, self.n = workload, model, float(prompt_tokens), group_size
        self.keep = workload.kv == "keep"
        self.clock = 0.0
        self.prefill_debt_s = 0.0  # engine-seconds of prefill not yet paid
        self.prefill_paid_s = 0.0  # engine-seconds of prefill paid so far
        # one array per field, aligned by sample; Any: numpy's stubs cannot type a mixed dict
        self.a: dict[str, Any] = {k: np.empty(0) for k in _FIELDS}
        self.a["grp"] = np.empty(0, dtype=np.int64)
        self.a["phase"] = np.empty(0, dtype=np.int8)
        self.a["calls"] = np.empty(0, dtype=np.int64)
        self._g_version = np.zeros(1024, dtype=np.int64)
        self._g_left = np.zeros(1024, dtype=np.int64)
        self._g_books = np.zeros((1024, _BOOKS))
        self._g_start = np.zeros(1024)
        self._g_end = np.zeros(1024)
        self._next_group = 0
        self.inflight_groups = 0
        self.inflight_by_version: dict[int, int] = {}

    # -- what the engines see -----------------------------------------------------------
    def _count(self, phase: int) -> int:
        return int(np.count_nonzero(self.a["phase"] == phase))

    @property
    def decoding(self) -> int:
        return self._count(DECODING)

    @property
    def waiting(self) -> int:
        return self._count(WAITING)

    @property
    def active_samples(self) -> int:
        """Episodes holding KV memory: decoding ones, and paused ones if KV is kept."""
        phase = self.a["phase"]
        held = phase == DECODING if not self.keep else phase != WAITING
        return int(np.count_nonzero(held))

    @property
    def inflight_samples(self) -> int:
        return int(self.a["phase"].size)

    def _held_tokens(self) -> FloatArray:
        a = self.a
        phase = a["phase"]
        tokens = np.where(phase == DECODING, a["ctx"] + 0.5 * a["turn"], a["ctx"])
        held = phase == DECODING if not self.keep else phase != WAITING
        return np.asarray(tokens[held], dtype=np.float64)

    def held_context_tokens(self) -> float:
        """Mean KV context of an episode holding memory (0 if none)."""
        held = self._held_tokens()
        return float(held.mean()) if held.size else 0.0

    def decode_context_tokens(self) -> float:
        a = self.a
        mask = a["phase"] == DECODING
        return float((a["ctx"][mask] + 0.5 * a["turn"][mask]).mean()) if mask.any() else 0.0

    def kv_tokens(self) -> float:
        return float(self._held_tokens().sum())

    # -- admission, weights and aborts ----------------------------------------------------
    def _steps(self, tokens: FloatArray | float) -> FloatArray:
        """The decode steps a sequence waits for its own prefill of `tokens` tokens."""
        return np.ceil(np.asarray(tokens) * self.m.prefill_per_token_s / self.m.decode_fixed_s)

    def _grow_groups(self, need: int) -> None:
        size = self._g_version.size
        if need <= size:
            return
        new = max(need, 2 * size)
        self._g_version = np.resize(self._g_version, new)
        self._g_left = np.concatenate((self._g_left, np.zeros(new - size, dtype=np.int64)))
        self._g_books = np.concatenate((self._g_books, np.zeros((new - size, _BOOKS))))
        self._g_start = np.concatenate((self._g_start, np.zeros(new - size)))
        self._g_end = np.concatenate((self._g_end, np.zeros(new - size)))

    def admit(
        self, rng: np.random.Generator, groups: int, version: int, progress: float, now: float = 0.0
    ) -> None:
        """Start `groups` groups of episodes under weights `version` at time `now`."""
        if groups <= 0:
            return
        size = groups * self.n
        first = self._next_group
        self._next_group += groups
        self._grow_groups(self._next_group)
        ids = np.repeat(np.arange(first, first + groups, dtype=np.int64), self.n)
        self._g_version[first : first + groups] = version
        self._g_left[first : first + groups] = self.n
        self._g_books[first : first + groups] = 0.0
        self._g_start[first : first + groups] = now
        self._g_end[first : first + groups] = now
        turn = self.w.draw_turns(rng, size)
        new: dict[str, Any] = {
            "grp": ids,
            "phase": np.zeros(size, dtype=np.int8),
            "fin": self.clock + self._steps(self.prompt) + turn,
            "wake": np.zeros(size),
            "calls": self.w.draw_calls(rng, groups, self.n, progress),
            "ctx": np.full(size, self.prompt),
            "turn": turn,
            "gen": np.zeros(size),
            "out": np.zeros(size),
            "pend": np.zeros(size),
            "wait": np.zeros(size),
            "pref": np.full(size, self.prompt),
            "t0": np.full(size, now),
            "cgen": np.zeros(size),
        }
        for k in _FIELDS:
            self.a[k] = np.concatenate((self.a[k], new[k]))
        self.prefill_debt_s += size * self.prompt * self.m.prefill_per_token_s
        self.inflight_groups += groups
        self.inflight_by_version[version] = self.inflight_by_version.get(version, 0) + groups

    def retag(self, version: int) -> None:
        """Every in-flight group continues under `version` (interruptible generation)."""
        live = np.unique(self.a["grp"])
        self._g_version[live] = version
        self.inflight_by_version = {version: self.inflight_groups} if self.inflight_groups else {}

    def recompute(self, share: float) -> float:
        """`share` of the held KV is lost (new weights, or engines leaving): owe its prefill.
        Returns the engine-seconds owed."""
        cost = share * self.kv_tokens() * self.m.prefill_per_token_s
        self.prefill_debt_s += cost
        return cost

    def resume_waiting(self, slots: int, now: float) -> None:
        """Give memory to up to `slots` evicted episodes whose tool has returned, oldest first."""
        idx = np.flatnonzero(self.a["phase"] == WAITING)
        if slots <= 0 or idx.size == 0:
            return
        idx = idx[np.argsort(self.a["wake"][idx], kind="stable")[:slots]]
        self._start_turn(idx, np.full(idx.size, self.clock), None)

    def _start_turn(self, idx: IntArray, clock_at: FloatArray, rng: np.random.Generator | None) -> None:
        a = self.a
        prefill = a["pend"][idx] + (0.0 if self.keep else a["ctx"][idx])
        a["ctx"][idx] += a["pend"][idx]
        a["out"][idx] += a["pend"][idx]
        a["pref"][idx] += prefill
        a["pend"][idx] = 0.0
        turn = a["turn"][idx] if rng is None else self.w.draw_turns(rng, idx.size)
        a["turn"][idx] = turn
        a["fin"][idx] = clock_at + self._steps(prefill) + turn
        a["phase"][idx] = DECODING
        self.prefill_debt_s += float(prefill.sum()) * self.m.prefill_per_token_s

    # -- the clocks ---------------------------------------------------------------------
    def advance(
        self, rng: np.random.Generator, tokens_per_s: float, dt: float, now: float, engines: int
    ) -> dict[int, Finished]:
        """Move both clocks by dt: decode at `tokens_per_s` per sequence after paying prefill
        debt, end turns, start and end tool calls; returns the groups that finished."""
        a = self.a
        # 1. Prefill first, then decode on the time left.
        decode_dt = dt
        if engines > 0 and self.prefill_debt_s > 0:
            paid = min(self.prefill_debt_s, engines * dt)
            self.prefill_debt_s -= paid
            self.prefill_paid_s += paid
            decode_dt = dt - paid / engines
        v0 = self.clock
        self.clock += tokens_per_s * decode_dt
        rate = (self.clock - v0) / dt if dt > 0 else 0.0  # token clock per wall second
        # 2. Turns that ended: answer, or call the tool.
        done_idx = np.flatnonzero((a["phase"] == DECODING) & (a["fin"] <= self.clock))
        ending = np.empty(0, dtype=np.int64)
        t_end = np.empty(0)
        if done_idx.size:
            t_done = now + np.clip((a["fin"][done_idx] - v0) / max(rate, 1e-12), 0.0, dt)
            a["gen"][done_idx] += a["turn"][done_idx]
            a["cgen"][done_idx] += (a["ctx"][done_idx] + 0.5 * a["turn"][done_idx]) * a["turn"][done_idx]
            a["ctx"][done_idx] += a["turn"][done_idx]
            room = a["ctx"][done_idx] + self.w.output_median_tokens + self.w.turn_median_tokens
            stop = (a["calls"][done_idx] == 0) | (room > self.w.max_context_tokens)
            ending, t_end = done_idx[stop], t_done[stop]
            call = done_idx[~stop]
            if call.size:
                pause = self.w.draw_pauses(rng, call.size)
                a["wake"][call] = t_done[~stop] + pause
                a["wait"][call] += pause
                a["pend"][call] = self.w.draw_outputs(rng, call.size)
                a["calls"][call] -= 1
                a["phase"][call] = PAUSED
        # 3. Tool calls that returned within dt: resume (kept KV) or wait for memory (evicted).
        back = np.flatnonzero((a["phase"] == PAUSED) & (a["wake"] <= now + dt))
        if back.size:
            if self.keep:
                at = v0 + rate * np.clip(a["wake"][back] - now, 0.0, dt)
                self._start_turn(back, at, rng)
            else:
                a["phase"][back] = WAITING
                a["turn"][back] = self.w.draw_turns(rng, back.size)
        return self._finish(ending, t_end)

    def _finish(self, ending: IntArray, t_end: FloatArray) -> dict[int, Finished]:
        if ending.size == 0:
            return {}
        a = self.a
        grp = a["grp"][ending]
        books = np.stack(
            (
                a["gen"][ending],
                a["out"][ending],
                a["wait"][ending],
                a["pref"][ending],
                a["cgen"][ending],
                t_end - a["t0"][ending],
            ),
            axis=1,
        )
        np.add.at(self._g_books, grp, books)
        np.maximum.at(self._g_end, grp, t_end)
        np.subtract.at(self._g_left, grp, 1)
        keep = np.ones(a["phase"].size, dtype=bool)
        keep[ending] = False
        for k in _FIELDS:
            a[k] = a[k][keep]
        closed = np.unique(grp[self._g_left[grp] == 0])
        out: dict[int, Finished] = {}
        for version in np.unique(self._g_version[closed]):
            g = closed[self._g_version[closed] == version]
            gen, outp, wait, pref, cgen, sample_s = self._g_books[g].sum(axis=0)
            span = float((self._g_end[g] - self._g_start[g]).sum())
            out[int(version)] = Finished(
                int(g.size),
                float(gen),
                float(outp),
                float(wait),
                float(pref),
                float(cgen),
                float(sample_s),
                span,
            )
            left = self.inflight_by_version.get(int(version), 0) - int(g.size)
            if left > 0:
                self.inflight_by_version[int(version)] = left
            else:
                self.inflight_by_version.pop(int(version), None)
        self.inflight_groups -= int(closed.size)
        return out
