"""The generator registry: names, parameters and their errors, and the Arrivals it builds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from workloads.registry import GENERATOR_NAMES, generate, generate_times, generator_params

ROOT = Path(__file__).resolve().parents[2]


def _documented_generators() -> list[tuple[str, str]]:
    """docs/workloads.md's table of generators: each row's name and parameters cell, in order."""
    table = (ROOT / "docs" / "workloads.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([a-z-]+)` \| ([^|]+) \|", table, re.MULTILINE)


def test_generator_names_are_exactly_the_documented_ones() -> None:
    assert tuple(name for name, _ in _documented_generators()) == GENERATOR_NAMES


def test_every_parameter_is_documented_with_its_default() -> None:
    for name, cell in _documented_generators():
        documented = dict(re.findall(r"`([a-z-]+)` \(([^)]+)\)", cell))
        defaults = generator_params(name)
        assert set(documented) == set(defaults), name
        for key, text in documented.items():
            # None: derived from the duration ("duration/2"); "0: off" documents what 0 means and
            # "3; 0.001 to 100" the valid range.
            if defaults[key] is None:
                assert "duration" in text, (name, key)
            else:
                assert float(re.split("[:;]", text)[0]) == defaults[key], (name, key)


def test_unknown_generator_lists_the_valid_names() -> None:
    with pytest.raises(ConfigError, match="unknown workload 'bursty'") as err:
        generate("bursty", duration_s=10, rate_per_s=1, task_names=("a",), rng=np.random.default_rng(1))
    for name in GENERATOR_NAMES:
        assert name in str(err.value)


def test_unknown_parameter_is_named_with_the_valid_ones() -> None:
    with pytest.raises(
        ConfigError,
        match=r"unknown parameter 'bursts' for workload 'mmpp'; valid parameters: "
        r"burst, high-s, low-s",
    ):
        generate_times(
            "mmpp", duration_s=10, rate_per_s=1, rng=np.random.default_rng(1), params={"bursts": 3}
        )


def test_poisson_takes_no_parameters() -> None:
    with pytest.raises(ConfigError, match="valid parameters: none"):
        generate_times("poisson", duration_s=10, rate_per_s=1, rng=np.random.default_rng(1), params={"cv": 3})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "3", True])
def test_non_numeric_parameter_value_is_rejected(value: object) -> None:
    params: dict[str, Any] = {"cv": value}
    with pytest.raises(ConfigError, match="'cv' must be a finite number"):
        generate_times("gamma", duration_s=10, rate_per_s=1, rng=np.random.default_rng(1), params=params)


def test_underscore_spelling_of_a_parameter_is_accepted() -> None:
    a = generate_times(
        "mmpp", duration_s=100, rate_per_s=5, rng=np.random.default_rng(1), params={"high_s": 2.0}
    )
    b = generate_times(
        "mmpp", duration_s=100, rate_per_s=5, rng=np.random.default_rng(1), params={"high-s": 2.0}
    )
    np.testing.assert_array_equal(a, b)


def test_defaults_are_clearly_bursty() -> None:
    assert generator_params("mmpp")["burst"] == 10.0
    assert generator_params("gamma")["cv"] == 3.0
    assert generator_params("pareto-onoff")["alpha"] == 1.5
    assert generator_params("flash-crowd")["factor"] == 8.0
    assert generator_params("hawkes")["branching"] == 0.9
    assert generator_params("step") == {"factor": 4.0, "at-s": None}  # None: half the duration


def test_parameters_change_the_workload() -> None:
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    a = generate_times("gamma", duration_s=100, rate_per_s=20, rng=rng_a)
    b = generate_times("gamma", duration_s=100, rate_per_s=20, rng=rng_b, params={"cv": 1.0})
    assert a.size != b.size or not np.array_equal(a, b)


def test_generate_builds_arrivals_over_the_requested_horizon() -> None:
    arrivals = generate(
        "flash-crowd",
        duration_s=300.0,
        rate_per_s=20.0,
        task_names=["x", "y"],
        rng=np.random.default_rng(3),
        zipf=1.0,
        params={"factor": 5.0},
    )
    assert isinstance(arrivals, Arrivals)
    assert arrivals.duration_s == 300.0
    assert arrivals.task_names == ("x", "y")
    assert arrivals.num_requests == pytest.approx(6000, rel=0.1)
    assert set(np.unique(arrivals.tasks)) == {0, 1}


def test_generate_is_deterministic_including_tasks() -> None:
    def make(seed: int) -> Arrivals:
        return generate(
            "hawkes",
            duration_s=200.0,
            rate_per_s=10.0,
            task_names=("a", "b", "c"),
            rng=np.random.default_rng(seed),
            zipf=0.5,
            rotate_s=20.0,
        )

    a, b = make(11), make(11)
    np.testing.assert_array_equal(a.times_s, b.times_s)
    np.testing.assert_array_equal(a.tasks, b.tasks)
    assert not np.array_equal(a.tasks[:50], make(12).tasks[:50])


def test_bad_task_names_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unique"):
        generate("poisson", duration_s=10, rate_per_s=1, task_names=("a", "a"), rng=np.random.default_rng(1))
