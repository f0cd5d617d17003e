"""One federated round of a real device: hand it to the device agent over the round channel.

The ClientApp (a fresh process per message in deployment) does not train itself. It sends the
global weights and the round's settings to the long-lived agent named by the SuperNode's
`agent-address` node config, waits for the agent to train through the round's deadline under
its allocator, and converts the agent's answer into a `RoundOutcome`.

Nothing here imports Flower or torch: `edge_client.client_app` converts records at its edge.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from dartfl.errors import ProtocolError
from edge_client.fl_sim_client import RoundOutcome
from edge_client.round_channel import request_round
from edge_client.round_messages import RoundOrder
from fltask.config import FlConfig

__all__ = ["run_agent_round"]

# Beyond the round's own deadline: installing the weights, the last flush, the transfer.
SLACK_S = 120.0


def run_agent_round(
    cfg: FlConfig, address: str, server_round: int, global_weights: Mapping[str, np.ndarray]
) -> RoundOutcome:
    order = RoundOrder(
        server_round=server_round,
        deadline_s=cfg.round_deadline_s,
        target_samples=cfg.round_target_samples,
        tasks=tuple(cfg.task_names),
        policy=cfg.policy,
        loss_weighting=cfg.weighting,
        learning_rate=cfg.round_learning_rate(server_round),
        step_samples=cfg.step_samples,
    )
    started = time.monotonic()
    result, weights = request_round(address, order, global_weights, timeout_s=cfg.round_deadline_s + SLACK_S)
    elapsed = time.monotonic() - started
    missing = set(global_weights) - set(weights)
    if missing:
        raise ProtocolError("bad-reply", f"the agent's update lacks weights {sorted(missing)[:5]}")
    metrics = dict(result.metrics)
    metrics["channel-wall-s"] = elapsed  # the ClientApp's view: handover + round + reply
    return RoundOutcome(
        weights=weights,
        samples_per_task={t: result.samples.get(t, 0) for t in cfg.task_names},
        metrics=metrics,
    )
