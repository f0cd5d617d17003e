"""DART's split decision for the Ray engine, on rates like those measured on this machine."""

from __future__ import annotations

import pytest

from dartfl.datacenter.worker_split import MeasuredRates, WorkerSplitController
from dartfl.errors import ConfigError


def _rates(decode_step_s: float = 0.013) -> MeasuredRates:
    return MeasuredRates(
        decode_step_s=decode_step_s,
        train_token_s=0.00035,
        mean_length=6.5,
        group_tokens=20.0,
        train_overhead_s=0.02,
    )


def _controller(workers: int = 3, eta: int = 2) -> WorkerSplitController:
    return WorkerSplitController(workers, batch_groups=12, group_size=4, eta=eta, slots=12, switch_s=0.3)


def test_first_layout_gives_training_the_workers_the_staleness_bound_leaves_idle() -> None:
    # eta 2 lets about one batch be in flight: one rollout worker's slots hold it all
    assert _controller(3).first_layout(_rates()) == 1
    assert _controller(4).first_layout(_rates()) == 1


def test_a_trainer_starved_layout_with_a_full_buffer_gives_a_worker_to_training() -> None:
    assert _controller(3).decide(2, _rates(), buffer_groups=20.0) == 1


def test_a_layout_holds_across_the_buffer_sawtooth_of_one_batch() -> None:
    # the buffer rises and falls by a batch every step: that alone must not move a worker
    for buffer in (0.0, 6.0, 12.0, 18.0, 24.0):
        assert _controller(3).decide(1, _rates(), buffer_groups=buffer) == 1


def test_slow_decoding_and_a_loose_bound_pull_a_worker_into_rollout() -> None:
    controller = _controller(3, eta=8)
    assert controller.decide(1, _rates(decode_step_s=0.1), buffer_groups=0.0) == 2


def test_a_decision_moves_one_worker_at_a_time() -> None:
    assert _controller(6).decide(5, _rates(), buffer_groups=30.0) == 4


def test_observed_steps_and_slices_update_the_rates() -> None:
    rates = MeasuredRates(decode_step_s=0.01, train_token_s=0.0003, mean_length=6.0)
    rates.observe_step(wall_s=0.2, shard_busy_s=[0.1, 0.1], tokens=480, groups=12)
    assert rates.group_tokens == pytest.approx(40.0)  # the first measurement replaces the guess
    assert rates.train_overhead_s > 0
    rates.observe_slice(steps=8, wall_s=0.16, lengths=[24] * 10)
    assert rates.decode_step_s > 0.01 and rates.mean_length > 6.0


def test_rates_and_controller_reject_impossible_values() -> None:
    with pytest.raises(ConfigError, match="decode_step_s"):
        MeasuredRates(decode_step_s=0.0, train_token_s=0.001, mean_length=5.0)
    with pytest.raises(ConfigError, match="workers"):
        _controller(1)


@pytest.mark.parametrize("eta", [1, 2])
def test_an_empty_buffer_pulls_a_worker_into_rollout_when_decoding_is_slow(eta: int) -> None:
    # The simulator's eta-0 rule (an empty buffer does not pull when no split keeps up) sat in
    # the shared scoring and held the Ray layout here, where rollout is simply too slow.
    assert _controller(3, eta=eta).decide(1, _rates(decode_step_s=0.1), buffer_groups=0.0) == 2
