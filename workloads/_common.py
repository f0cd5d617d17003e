"""Shared pieces of the generators: array types, parameter checks, the size guard."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dartfl.errors import ConfigError

__all__ = ["MAX_REQUESTS", "FloatArray", "IntArray", "check_horizon", "require"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# A workload is held in memory as two arrays; past this many requests a typo in --rate or
# --duration-s would exhaust memory long before anything useful happens.
MAX_REQUESTS = 50_000_000


def require(generator: str, param: str, value: float, ok: bool, expected: str) -> None:
    """Raise a ConfigError naming the generator's parameter as the CLI spells it (`--param
    high-s=...` is the keyword `high_s`), its bad value and the valid range."""
    if not (ok and math.isfinite(value)):
        raise ConfigError(
            f"{generator} parameter {param} (--param {param}=...) must be {expected}, got {value!r}"
        )


def check_horizon(generator: str, duration_s: float, rate_per_s: float) -> None:
    """Validate the arguments every generator shares; messages name the CLI flag that sets each."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(
            f"{generator}: the duration (--duration-s) must be a finite number of seconds > 0, "
            f"got {duration_s!r}"
        )
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ConfigError(
            f"{generator}: the mean rate (--rate) must be a finite number of requests/s > 0, "
            f"got {rate_per_s!r}"
        )
    expected = duration_s * rate_per_s
    if expected > MAX_REQUESTS:
        raise ConfigError(
            f"{generator}: {rate_per_s:g} req/s for {duration_s:g} s is about {expected:.3g} requests, "
            f"more than the {MAX_REQUESTS:,} this tool holds in memory; lower --rate or --duration-s"
        )
