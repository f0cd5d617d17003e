"""The Flower ClientApp (component `edge_client.client_app:app`): one adapter, two back ends.

- Simulation (node config has `partition-id` and `num-partitions`, as Flower's simulation
  gives every virtual SuperNode): the round runs on a virtual-time device whose training is
  real (edge_client.fl_sim_client).
- Deployment (node config has `agent-address`, e.g. `--node-config 'agent-address="127.0.0.1:8765"'`):
  the round is handed to the long-lived device agent over its local-only round channel
  (edge_client.round_channel, edge_client.fl_deploy_client); the agent installs the global
  weights, trains until the round's deadline under its allocator and returns its update.
The ClientApp is not long-lived (a fresh process per message in deployment, reused Ray actors
in simulation), so the little it remembers between rounds lives in `context.state`.
"""

from __future__ import annotations

import logging

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from dartfl.errors import ConfigError
from fltask.config import FlConfig
from fltask.records import arrays_to_weights, metrics_to_record, weights_to_arrays

__all__ = ["app"]

log = logging.getLogger(__name__)

app = ClientApp()

_STATE_KEY = "dartfl"


@app.train()
def train(msg: Message, context: Context) -> Message:
    config = msg.content["config"]
    arrays = msg.content["arrays"]
    if not isinstance(config, ConfigRecord) or not isinstance(arrays, ArrayRecord):
        raise ConfigError("a train message needs an ArrayRecord 'arrays' and a ConfigRecord 'config'")
    cfg = FlConfig.from_run_config({**context.run_config, **dict(config)})
    server_round = int(config.get("server-round", 1))  # type: ignore[arg-type]
    weights = arrays_to_weights(arrays)
    node = context.node_config
    if "agent-address" in node:
        from edge_client.fl_deploy_client import run_agent_round

        outcome = run_agent_round(cfg, str(node["agent-address"]), server_round, weights)
    elif "partition-id" in node and "num-partitions" in node:
        from edge_client.fl_sim_client import run_sim_round

        _limit_threads()
        outcome = run_sim_round(
            cfg, int(node["partition-id"]), int(node["num-partitions"]), server_round, weights
        )
    else:
        raise ConfigError(
            "node config needs agent-address (deployment: the device agent's round channel) or "
            f"partition-id and num-partitions (simulation); got keys {sorted(node)}"
        )
    _remember(context, server_round, outcome.metrics.get("num-examples", 0.0))
    content = RecordDict(
        {
            "arrays": weights_to_arrays(outcome.weights),
            "metrics": metrics_to_record(outcome.metrics, outcome.samples_per_task),
        }
    )
    return Message(content=content, reply_to=msg)


def _remember(context: Context, server_round: int, samples: float) -> None:
    """Keep this node's running totals across rounds in context.state (never in module globals)."""
    previous = context.state.metric_records.get(_STATE_KEY)
    total = float(previous["samples-total"]) if previous is not None else 0.0  # type: ignore[arg-type]
    rounds = int(previous["rounds"]) if previous is not None else 0  # type: ignore[arg-type]
    context.state[_STATE_KEY] = MetricRecord(
        {"rounds": rounds + 1, "last-round": server_round, "samples-total": total + samples}
    )


def _limit_threads() -> None:
    """One intra-op thread per virtual client: Ray runs one client per CPU."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
