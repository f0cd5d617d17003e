"""The device agent's serve path: one inference batch that the executor hands out, classified on
ONNX Runtime and answered, one reply per request on its reply topic (binary replies bound for
one topic together, as one message), each answer remembered in case the request comes again.

`BatchServer.answer` runs outside the executor's lock; the agent accounts the batch in the
executor afterwards with what it returns."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dartfl import protocol
from dartfl.executor import InferenceBatch
from edge_client.agent_config import AgentConfig
from edge_client.agent_ingress import QueuedRequest
from edge_client.agent_rounds import FederatedRounds
from edge_client.answered import RecentRequests
from edge_client.telemetry import RequestStats

if TYPE_CHECKING:
    from edge_client.runtime import ModelRuntime

__all__ = ["BatchServer", "Reply", "Served"]

Reply = Callable[[str, protocol.Encoded, bytes | None], None]  # topic, reply, correlation data


@dataclass(frozen=True)
class Served:
    """What answering one batch took, for the executor's accounting."""

    done_s: float  # when the model had answered (monotonic): each request's latency ends here
    compute_cpu_s: float  # the forward pass, thread CPU time
    overhead_cpu_s: float  # counting and publishing the replies, thread CPU time


class BatchServer:
    """Classifies a batch, replies to each request, counts the answers (stats, round, recent)."""

    def __init__(
        self,
        config: AgentConfig,
        runtime: ModelRuntime,
        stats: RequestStats,
        recent: RecentRequests,
        rounds: FederatedRounds,
        reply: Reply,
    ) -> None:
        self.config, self.runtime, self.stats, self.recent = config, runtime, stats, recent
        self.rounds, self.reply = rounds, reply

    def answer(self, batch: InferenceBatch[QueuedRequest]) -> Served:
        task, requests = batch.task, batch.requests
        images = np.stack([r.image for r in requests]).astype(np.float32)[:, None, :, :] / 255.0
        cpu0 = time.thread_time()
        task_name = self.config.tasks[task]
        labels, version = self.runtime.classify(task_name, images)
        done = time.monotonic()
        compute_cpu_s = time.thread_time() - cpu0
        started = time.thread_time()
        latencies = [done - r.received_s for r in requests]
        slo = self.config.slo_s
        met = sum(latency <= slo for latency in latencies)
        if (job := self.rounds.active) is not None:
            job.answered += len(requests)
            job.met += met
        self.stats.answered_batch(done, latencies, slo)
        # Binary replies bound for one topic (their ids in the payload) travel as one message:
        # a publish costs about as much as the rest of a request's path (docs/protocol.md).
        together: dict[str, list[bytes]] = {}
        for r, label, latency in zip(requests, labels.tolist(), latencies, strict=True):
            answer = protocol.answer(r.binary, r.id, task_name, label, latency * 1e3, version)
            self.recent.answered(r.reply_to, r.id, answer)
            if r.binary and r.correlation_data is None:
                together.setdefault(r.reply_to, []).append(answer[0])
            else:
                self.reply(r.reply_to, answer, r.correlation_data)
        for topic, records in together.items():
            self.reply(topic, (b"".join(records), protocol.REPLY_CONTENT_TYPE), None)
        return Served(done, compute_cpu_s, time.thread_time() - started)

    def refuse_expired(self, expired: Sequence[tuple[int, QueuedRequest, float, float]]) -> None:
        """Answer the queued requests the executor refused once they could no longer make
        their deadline (`DeviceExecutor.expire_hopeless`): `queue-full`, as at admission."""
        if not expired:
            return
        self.stats.rejected_now(time.monotonic(), len(expired))
        for task, r, _delay, _cause in expired:
            refused = protocol.refusal(r.binary, r.id, "queue-full", self.config.tasks[task])
            self.recent.answered(r.reply_to, r.id, refused)
            self.reply(r.reply_to, refused, r.correlation_data)
