"""Cap the compute threads of the device agent, so it behaves on a 4-core Raspberry Pi.

Call `cap_threads` once, early in the agent's entry point, before the first `import torch`
elsewhere if possible: OpenMP and MKL read their environment variables when torch loads.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from dartfl.errors import ConfigError

__all__ = ["ThreadSettings", "cap_threads"]

log = logging.getLogger(__name__)

_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class ThreadSettings:
    """The thread counts in effect after `cap_threads`."""

    intra_op: int
    inter_op: int
    inter_op_capped: bool  # False if torch had already fixed its inter-op pool


def cap_threads(n: int, *, inter_op: int = 1) -> ThreadSettings:
    """Let torch use `n` intra-op threads and `inter_op` inter-op threads (default 1).

    OMP/MKL/OpenBLAS variables are set only where the user has not set them. torch lets the
    inter-op pool be sized only once and only before it starts; later calls keep the size
    it has and say so in the result.
    """
    for name, value in (("n", n), ("inter_op", inter_op)):
        if not (isinstance(value, int) and value >= 1):
            raise ConfigError(f"thread count {name} must be an integer >= 1, got {value!r}")
    for var in _ENV_VARS:
        os.environ.setdefault(var, str(n))

    import torch  # after the environment: OpenMP reads it when torch loads

    torch.set_num_threads(n)
    capped = True
    if torch.get_num_interop_threads() != inter_op:
        try:
            torch.set_num_interop_threads(inter_op)
        except RuntimeError:
            capped = False
            log.warning(
                "torch's inter-op thread pool is already running with %d threads; cannot set it to %d",
                torch.get_num_interop_threads(),
                inter_op,
            )
    return ThreadSettings(torch.get_num_threads(), torch.get_num_interop_threads(), capped)
