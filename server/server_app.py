"""The Flower ServerApp (component `server.server_app:app`): parse the run config, run the rounds."""

from __future__ import annotations

import logging

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fltask.config import FlConfig
from server.rounds import run_rounds

__all__ = ["app"]

log = logging.getLogger(__name__)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = FlConfig.from_run_config(context.run_config)
    _limit_threads()
    summary = run_rounds(grid, cfg)
    log.warning(
        "federated run done: policy %s, %d rounds, mean accuracy %.4f, demand-weighted %.4f",
        cfg.policy,
        summary["rounds"],
        summary["mean_accuracy"] or 0.0,
        summary["demand_weighted_accuracy"] or 0.0,
    )


def _limit_threads() -> None:
    import torch

    torch.set_num_threads(1)
