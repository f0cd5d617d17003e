"""The one factory for synthetic workloads: a generator by name, its parameters, a task mix.

Parameter names and defaults come from each generator's keyword-only arguments, with
underscores written as dashes (`high_s` is the parameter `high-s`), so the signature is the
single source of truth that `generate`, the CLI help and the docs all read.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from workloads._common import FloatArray
from workloads.compound import compound_times
from workloads.hawkes import hawkes_times
from workloads.mix import TaskMix
from workloads.modulated import mmpp_times, pareto_onoff_times
from workloads.renewal import gamma_times, poisson_times
from workloads.shaped import diurnal_times, flash_crowd_times, step_times

__all__ = ["GENERATORS", "GENERATOR_NAMES", "generate", "generate_times", "generator_params"]

GeneratorFn = Callable[..., FloatArray]

GENERATORS: Mapping[str, GeneratorFn] = {
    "poisson": poisson_times,
    "mmpp": mmpp_times,
    "gamma": gamma_times,
    "pareto-onoff": pareto_onoff_times,
    "diurnal": diurnal_times,
    "step": step_times,
    "flash-crowd": flash_crowd_times,
    "hawkes": hawkes_times,
    "compound": compound_times,
}
GENERATOR_NAMES: tuple[str, ...] = tuple(GENERATORS)


def generator_params(name: str) -> dict[str, float | None]:
    """A generator's parameters and defaults (None: derived from the duration, see the docstring)."""
    fn = _lookup(name)
    return {
        p.name.replace("_", "-"): p.default
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def generate_times(
    name: str,
    *,
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    params: Mapping[str, float] | None = None,
) -> FloatArray:
    """Sorted arrival times over [0, duration_s) from the named generator."""
    fn = _lookup(name)
    valid = generator_params(name)
    kwargs: dict[str, float] = {}
    for key, value in (params or {}).items():
        canonical = key.strip().replace("_", "-")
        if canonical not in valid:
            listed = ", ".join(valid) if valid else "none"
            raise ConfigError(f"unknown parameter {key!r} for workload {name!r}; valid parameters: {listed}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"workload {name!r} parameter {key!r} must be a finite number, got {value!r}")
        kwargs[canonical.replace("-", "_")] = float(value)
    times: FloatArray = fn(duration_s, rate_per_s, rng, **kwargs)
    return times


def generate(
    name: str,
    *,
    duration_s: float,
    rate_per_s: float,
    task_names: Sequence[str],
    rng: np.random.Generator,
    zipf: float = 0.0,
    rotate_s: float | None = None,
    params: Mapping[str, float] | None = None,
) -> Arrivals:
    """A synthetic workload: arrival times from the named generator, tasks from a Zipf mix.

    Deterministic for a given rng state. The expected number of requests is
    rate_per_s x duration_s for every generator (see docs/workloads.md).
    """
    mix = TaskMix(tuple(task_names), zipf_s=zipf, rotate_s=rotate_s)
    times = generate_times(name, duration_s=duration_s, rate_per_s=rate_per_s, rng=rng, params=params)
    return Arrivals(times, mix.assign(times, rng), mix.task_names, float(duration_s))


def _lookup(name: str) -> GeneratorFn:
    try:
        return GENERATORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown workload {name!r}; valid workloads: {', '.join(GENERATOR_NAMES)}"
        ) from None
