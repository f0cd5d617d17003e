"""The shared integer-split decision: target, hysteresis, dead time per direction, step limit."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.errors import ConfigError
from dartfl.unit_split import SplitRule, choose_split

KS = np.arange(1, 8)  # e.g. cores 1..7 serving of 8


def _rule(**kw: float) -> SplitRule:
    base: dict[str, float] = {"dead_up_s": 1.0, "dead_down_s": 1.0, "hold_s": 60.0, "hysteresis": 0.05}
    base.update(kw)
    return SplitRule(**base)  # type: ignore[arg-type]


def _peaked(best: int, height: float = 10.0) -> np.ndarray:
    return height - np.abs(KS - best).astype(float)


def test_moves_to_the_best_split_when_the_gain_clears_the_band_and_repays_the_dead_time() -> None:
    d = choose_split(KS, 2, _peaked(5), units=8, scale=10.0, rule=_rule())
    assert d.split == 5 and d.gain == pytest.approx(3.0)


def test_stays_when_the_gain_is_inside_the_hysteresis_band() -> None:
    values = np.array([1.0, 1.0, 1.02, 1.0, 1.0, 1.0, 1.0])
    assert choose_split(KS, 2, values, units=8, scale=1.0, rule=_rule(hysteresis=0.05)).split == 2
    assert choose_split(KS, 2, values, units=8, scale=1.0, rule=_rule(hysteresis=0.01)).split == 3


def test_dead_time_is_priced_per_direction() -> None:
    # Same gain either way; a unit moving up is dead 50 s, down 1 s (verl: 9.1 s / 3.3 s).
    rule = _rule(dead_up_s=50.0, dead_down_s=1.0, hold_s=10.0)
    up = choose_split(KS, 3, _peaked(4), units=8, scale=8.0, rule=rule)
    down = choose_split(KS, 5, _peaked(4), units=8, scale=8.0, rule=rule)
    assert up.split == 3 and up.dead_loss == pytest.approx(50.0)  # 1 unit x 50 s x 8/8 per s
    assert down.split == 4 and down.dead_loss == pytest.approx(1.0)


def test_a_long_move_is_made_in_steps_of_at_most_max_step() -> None:
    d = choose_split(KS, 1, _peaked(7), units=8, scale=10.0, rule=_rule(max_step=2))
    assert d.split == 3 and d.target == 3


def test_a_value_function_and_a_current_split_outside_the_allowed_ones() -> None:
    tp4 = np.arange(4, 61, 4)  # GPUs in multiples of a TP size of 4
    d = choose_split(tp4, 2, lambda ks: -np.abs(ks - 32.0), units=64, scale=1.0, rule=_rule())
    assert d.split == 32  # priced from the nearest allowed split (4)


def test_bad_inputs_name_the_value() -> None:
    with pytest.raises(ConfigError, match="ascending"):
        choose_split([3, 2], 2, [1.0, 2.0], units=4, scale=1.0, rule=_rule())
    with pytest.raises(ConfigError, match="one value per allowed split"):
        choose_split(KS, 2, [1.0], units=8, scale=1.0, rule=_rule())
    with pytest.raises(ConfigError, match="dead_up_s"):
        _rule(dead_up_s=-1.0)
