"""The multitask aggregation rule on hand-made updates."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.errors import InputError
from server.aggregation import ClientUpdate, aggregate, part_of

GLOBAL = {
    "trunk.0.weight": np.zeros(2, dtype=np.float32),
    "heads.a.weight": np.zeros(2, dtype=np.float32),
    "heads.b.weight": np.full(2, 7.0, dtype=np.float32),
}


def _update(trunk: float, a: float, b: float, samples: dict[str, int]) -> ClientUpdate:
    weights = {
        "trunk.0.weight": np.full(2, trunk, dtype=np.float32),
        "heads.a.weight": np.full(2, a, dtype=np.float32),
        "heads.b.weight": np.full(2, b, dtype=np.float32),
    }
    return ClientUpdate(weights, samples)


def test_trunk_is_weighted_by_all_samples_and_each_head_by_its_task_samples() -> None:
    u1 = _update(1.0, 10.0, 100.0, {"a": 30, "b": 10})  # 40 samples
    u2 = _update(3.0, 20.0, 200.0, {"a": 10, "b": 50})  # 60 samples
    out = aggregate(GLOBAL, [u1, u2])
    assert out["trunk.0.weight"] == pytest.approx([(1 * 40 + 3 * 60) / 100] * 2)
    assert out["heads.a.weight"] == pytest.approx([(10 * 30 + 20 * 10) / 40] * 2)
    assert out["heads.b.weight"] == pytest.approx([(100 * 10 + 200 * 50) / 60] * 2)
    assert out["trunk.0.weight"].dtype == np.float32


def test_a_client_that_trained_no_sample_of_a_task_does_not_drag_its_head() -> None:
    trained_b = _update(1.0, 5.0, 42.0, {"a": 10, "b": 10})
    never_b = _update(1.0, 5.0, 7.0, {"a": 10, "b": 0})  # head b untouched (still the old global)
    out = aggregate(GLOBAL, [trained_b, never_b])
    assert out["heads.b.weight"] == pytest.approx([42.0, 42.0])


def test_a_part_nobody_trained_keeps_the_global_weights() -> None:
    out = aggregate(GLOBAL, [_update(2.0, 9.0, 9.0, {"a": 5, "b": 0})])
    assert out["heads.b.weight"] == pytest.approx([7.0, 7.0])
    assert out["trunk.0.weight"] == pytest.approx([2.0, 2.0])
    assert aggregate(GLOBAL, [_update(2.0, 9.0, 9.0, {"a": 0, "b": 0})])["trunk.0.weight"] == pytest.approx(
        [0, 0]
    )


def test_updates_that_do_not_fit_the_model_are_rejected() -> None:
    bad = ClientUpdate({"trunk.0.weight": np.zeros(2)}, {"a": 1})
    with pytest.raises(InputError, match="missing"):
        aggregate(GLOBAL, [bad])
    with pytest.raises(InputError, match="integer >= 0"):
        ClientUpdate(GLOBAL, {"a": -1})


def test_part_of_names_the_head_task() -> None:
    assert part_of("heads.fashion.weight") == "fashion"
    assert part_of("trunk.7.bias") is None
