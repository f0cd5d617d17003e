"""The Flower ServerApp (component `server.server_app:app`): parse the run config, run the rounds.

Its process is an entry point, so it configures logging: this package's INFO lines (the round
loop's progress, one line per round, and where the run is recorded) go to stderr, which
Flower mirrors into the run's log (`flwr run --stream`, `flwr log RUN_ID`).
"""

from __future__ import annotations

import logging
import sys

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

import dartfl
from fltask.config import FlConfig
from server.rounds import run_rounds

__all__ = ["app"]

log = logging.getLogger(__name__)

app = ServerApp()

_PACKAGE = __name__.partition(".")[0]  # this package's logger, whatever it is installed as


@app.main()
def main(grid: Grid, context: Context) -> None:
    _log_to_the_run_stream()
    cfg = FlConfig.from_run_config(context.run_config)
    log.info(
        "DART-FL %s ServerApp (%s): policy %s, %d rounds, tasks %s",
        dartfl.__version__,
        __file__,
        cfg.policy,
        cfg.num_server_rounds,
        cfg.tasks,
    )
    _limit_threads()
    summary = run_rounds(grid, cfg)
    log.warning(
        "federated run done: policy %s, %d rounds, mean accuracy %.4f, demand-weighted %.4f",
        cfg.policy,
        summary["rounds"],
        summary["mean_accuracy"] or 0.0,
        summary["demand_weighted_accuracy"] or 0.0,
    )


def _log_to_the_run_stream() -> None:
    """INFO and above of this package to stderr, once per process (Flower's own logger keeps
    its handler; the root logger is left alone)."""
    logger = logging.getLogger(_PACKAGE)
    logger.setLevel(logging.INFO)
    if not any(getattr(h, "dartfl_run_stream", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.dartfl_run_stream = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False  # not twice, should a root handler appear


def _limit_threads() -> None:
    import torch

    torch.set_num_threads(1)
