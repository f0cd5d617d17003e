"""The oracle headroom: how much any reallocation could gain over the best fixed split."""

from __future__ import annotations

import pytest

from dartfl.datacenter import DcConfig, LogNormalLengths, model_spec
from dartfl.datacenter.sweep import _Phase, reallocation_headroom

FRACTIONS = (0.2, 0.35, 0.5, 0.65, 0.8)


def _config(prompt_tokens: int) -> DcConfig:
    return DcConfig(gpus=32, model=model_spec("7b"), steps=40, eta=2, prompt_tokens=prompt_tokens)


def test_phase_replays_its_slice_of_the_drift() -> None:
    base = LogNormalLengths(median_tokens=100.0, drift=16.0, max_tokens=10_000)
    last_quarter = _Phase(base, 0.75, 1.0)
    assert last_quarter.median(0.0) == pytest.approx(base.median(0.75))
    assert last_quarter.median(1.0) == pytest.approx(base.median(1.0))
    assert last_quarter.max_tokens == base.max_tokens


def test_a_balance_that_moves_leaves_headroom_and_rollout_grows() -> None:
    # Short answers to long prompts first (training-heavy), long answers last (rollout-heavy).
    lengths = LogNormalLengths(median_tokens=128.0, drift=32.0, max_tokens=16_384)
    headroom = reallocation_headroom(_config(4096), lengths, seed=3, phases=2, fractions=FRACTIONS)
    assert headroom.phase_best[0] < headroom.phase_best[-1]
    assert headroom.ratio > 1.05
    assert headroom.oracle_s <= headroom.fixed_s


def test_without_drift_the_best_fixed_split_is_about_the_oracle() -> None:
    lengths = LogNormalLengths(median_tokens=512.0, max_tokens=4096)
    headroom = reallocation_headroom(_config(512), lengths, seed=3, phases=2, fractions=FRACTIONS)
    assert 1.0 <= headroom.ratio < 1.03


def test_more_phases_than_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="phases"):
        reallocation_headroom(_config(512), LogNormalLengths(), seed=1, phases=41)
