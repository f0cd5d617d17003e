"""The multitask model (weights, state-dict layout) and the microbatch trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dartfl.errors import ConfigError, InputError
from fltask.data import TaskData
from fltask.model import build_model, get_weights, set_weights
from fltask.partition import client_view
from fltask.trainer import Trainer, _EpochSampler, evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# ---------------------------------------------------------------------------- model


def test_width_one_has_about_100k_parameters_and_width_scales_it(task_classes: dict[str, int]) -> None:
    small = build_model(task_classes, width=1.0).num_parameters()
    big = build_model(task_classes, width=4.0).num_parameters()
    assert 80_000 <= small <= 130_000
    assert big > 3 * small


def test_forward_gives_each_heads_classes() -> None:
    model = build_model({"a": 10, "b": 3})
    x = torch.zeros(5, 1, 28, 28)
    assert model(x, "a").shape == (5, 10) and model(x, "b").shape == (5, 3)
    with pytest.raises(InputError, match="unknown task 'c'; this model has heads for: a, b"):
        model(x, "c")


def test_state_dict_keys_split_into_trunk_and_heads(task_classes: dict[str, int]) -> None:
    model = build_model(task_classes)
    keys = list(model.state_dict())
    trunk = model.trunk_parameters()
    heads = {t: model.head_parameters(t) for t in task_classes}
    assert trunk and all(k.startswith("trunk.") for k in trunk)
    for task, names in heads.items():
        assert names == [f"heads.{task}.weight", f"heads.{task}.bias"]
    assert sorted(trunk + [k for names in heads.values() for k in names]) == sorted(keys)


def test_model_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="at least one task"):
        build_model({})
    with pytest.raises(ConfigError, match="classes >= 2"):
        build_model({"a": 1})
    with pytest.raises(ConfigError, match=r"no '\.'"):
        build_model({"a.b": 10})
    with pytest.raises(ConfigError, match="width"):
        build_model({"a": 10}, width=0)


def test_build_model_is_seeded_and_leaves_the_global_rng_alone(task_classes: dict[str, int]) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b, c = (
        build_model(task_classes, seed=7),
        build_model(task_classes, seed=7),
        build_model(task_classes, seed=8),
    )
    assert torch.equal(torch.rand(3), expected)
    wa, wb, wc = get_weights(a), get_weights(b), get_weights(c)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    assert not np.array_equal(wa["trunk.0.weight"], wc["trunk.0.weight"])


def test_weights_round_trip_between_models(task_classes: dict[str, int]) -> None:
    src, dst = build_model(task_classes, seed=1), build_model(task_classes, seed=2)
    weights = get_weights(src)
    assert all(v.dtype == np.float32 for v in weights.values())
    set_weights(dst, weights)
    x = torch.rand(4, 1, 28, 28)
    for task in task_classes:
        assert torch.equal(src(x, task), dst(x, task))
    weights["trunk.0.weight"][:] = 0  # a copy: the model is untouched
    assert src.trunk[0].weight.abs().sum() > 0


def test_set_weights_rejects_wrong_keys_and_shapes_and_loads_nothing(task_classes: dict[str, int]) -> None:
    model = build_model(task_classes, seed=1)
    before = get_weights(model)
    other = get_weights(build_model(task_classes, seed=2))
    missing = {k: v for k, v in other.items() if k != "heads.fashion.bias"}
    with pytest.raises(InputError, match=r"missing \['heads.fashion.bias'\], unexpected none"):
        set_weights(model, missing)
    with pytest.raises(InputError, match=r"unexpected \['heads.extra.bias'\]"):
        set_weights(model, {**other, "heads.extra.bias": np.zeros(3, np.float32)})
    wide = get_weights(build_model(task_classes, width=2.0))
    with pytest.raises(
        InputError, match=r"weight 'trunk.0.weight' has shape \(32, 1, 3, 3\), this model expects"
    ):
        set_weights(model, wide)
    after = get_weights(model)
    assert all(np.array_equal(before[k], after[k]) for k in before)


# ---------------------------------------------------------------------------- trainer


def _trainer(tasks: dict[str, TaskData], **kwargs: object) -> Trainer:
    model = build_model({n: d.num_classes for n, d in tasks.items()}, seed=0)
    return Trainer(model, tasks, **kwargs)  # type: ignore[arg-type]


def test_microbatch_mix_follows_the_shares(small_tasks: dict[str, TaskData]) -> None:
    trainer = _trainer(small_tasks, step_samples=64)
    totals = np.zeros(3, dtype=int)
    for _ in range(100):
        result = trainer.train_microbatch(10, (0.5, 0.3, 0.2), (1.0, 1.0, 1.0))
        assert sum(result.samples_per_task) == 10
        totals += result.samples_per_task
    assert totals.tolist() == [500, 300, 200]
    totals[:] = 0
    for _ in range(50):  # shares below one sample per microbatch still train now and then
        totals += trainer.train_microbatch(4, (0.9, 0.05, 0.05), (1.0, 1.0, 1.0)).samples_per_task
    assert totals.tolist() == [180, 10, 10]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_accumulated_microbatches_step_like_one_batch(
    small_tasks: dict[str, TaskData], optimizer: str
) -> None:
    shares, weights = (0.5, 0.25, 0.25), (1.5, 1.0, 0.5)
    split = _trainer(small_tasks, optimizer=optimizer, step_samples=32)
    whole = _trainer(small_tasks, optimizer=optimizer, step_samples=32)
    stepped = [split.train_microbatch(8, shares, weights).stepped for _ in range(8)]
    assert stepped == [False, False, False, True] * 2
    for _ in range(2):
        assert whole.train_microbatch(32, shares, weights).stepped
    assert split.steps == whole.steps == 2
    a, b = get_weights(split.model), get_weights(whole.model)
    assert not np.array_equal(
        a["trunk.0.weight"], get_weights(build_model(split.model.task_classes))["trunk.0.weight"]
    )
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_a_microbatch_that_crosses_a_step_is_split_at_the_boundary(small_tasks: dict[str, TaskData]) -> None:
    # 24 + 24 samples: the second microbatch completes the step with 8 and keeps 16 for the
    # next; exactly what 32 then 16 do.
    split = _trainer(small_tasks, step_samples=32)
    whole = _trainer(small_tasks, step_samples=32)
    assert [split.train_microbatch(24, (1 / 3,) * 3, (1, 1, 1)).stepped for _ in range(2)] == [False, True]
    assert whole.train_microbatch(32, (1 / 3,) * 3, (1, 1, 1)).stepped
    assert not whole.train_microbatch(16, (1 / 3,) * 3, (1, 1, 1)).stepped
    assert split.steps == whole.steps == 1 and split.pending_samples == whole.pending_samples == 16
    a, b = get_weights(split.model), get_weights(whole.model)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_steps_come_every_step_samples_however_the_microbatches_are_cut(
    small_tasks: dict[str, TaskData],
) -> None:
    # Stepping after the crossing microbatch on all it brought made 23-sample microbatches
    # step every 46 samples: 5 steps for 230 samples instead of 7, so a policy that cut
    # smaller microbatches learnt less from the same samples.
    trainer = _trainer(small_tasks, step_samples=32)
    results = [trainer.train_microbatch(23, (1 / 3,) * 3, (1, 1, 1)) for _ in range(10)]
    assert trainer.steps == 7 and trainer.pending_samples == 230 - 7 * 32
    assert sum(r.stepped for r in results) == 7
    assert [sum(r.samples_per_task) for r in results] == [23] * 10
    big = _trainer(small_tasks, step_samples=32)
    assert big.train_microbatch(100, (1 / 3,) * 3, (1, 1, 1)).stepped
    assert big.steps == 3 and big.pending_samples == 4


def test_the_step_size_changes_only_between_steps(small_tasks: dict[str, TaskData]) -> None:
    # A deployed agent gets step-samples with each round; changing it mid-step would leave
    # more samples pending than the new step holds.
    trainer = _trainer(small_tasks, step_samples=32)
    trainer.train_microbatch(20, (1 / 3,) * 3, (1, 1, 1))
    with pytest.raises(ConfigError, match="flush first"):
        trainer.set_step_samples(16)
    assert trainer.flush()
    trainer.set_step_samples(16)
    assert [trainer.train_microbatch(12, (1 / 3,) * 3, (1, 1, 1)).stepped for _ in range(2)] == [False, True]
    assert trainer.pending_samples == 8
    with pytest.raises(ConfigError, match="integer >= 1"):
        trainer.set_step_samples(0)


def test_a_split_microbatch_reports_the_loss_of_all_its_samples(small_tasks: dict[str, TaskData]) -> None:
    # 20 pending + 24: the microbatch runs as 12 and 12; its loss and per-task cross-entropy
    # cover all 24 samples, as the FL round's metrics expect.
    trainer = _trainer(small_tasks, step_samples=32)
    trainer.train_microbatch(20, (1 / 3,) * 3, (1, 1, 1))
    weights = (1.5, 1.0, 0.5)
    result = trainer.train_microbatch(24, (0.5, 0.25, 0.25), weights)
    assert result.stepped and trainer.pending_samples == 12
    assert result.samples_per_task == (12, 6, 6)
    weighted = sum(w * ce for w, ce in zip(weights, result.ce_sum_per_task, strict=True))
    assert result.loss * 24 == pytest.approx(weighted)
    assert all(ce > 0 for ce in result.ce_sum_per_task)


def test_zero_loss_weight_gives_its_head_zero_gradient(small_tasks: dict[str, TaskData]) -> None:
    trainer = _trainer(small_tasks, step_samples=1000)
    result = trainer.train_microbatch(30, (1 / 3,) * 3, (1.0, 0.0, 2.0))
    assert result.samples_per_task == (10, 10, 10) and not result.stepped
    heads = trainer.model.heads
    assert torch.count_nonzero(heads["fashion"].weight.grad) == 0
    assert torch.count_nonzero(heads["digits"].weight.grad) > 0
    before = heads["fashion"].weight.detach().clone()
    assert trainer.flush() and not trainer.flush()
    assert torch.equal(heads["fashion"].weight, before)


def test_loss_weights_scale_the_gradient(small_tasks: dict[str, TaskData]) -> None:
    one, two = (_trainer(small_tasks, step_samples=1000) for _ in range(2))
    loss1 = one.train_microbatch(12, (1 / 3,) * 3, (1.0, 1.0, 1.0)).loss
    loss2 = two.train_microbatch(12, (1 / 3,) * 3, (2.0, 2.0, 2.0)).loss
    assert loss2 == pytest.approx(2 * loss1)
    g1, g2 = one.model.trunk[0].weight.grad, two.model.trunk[0].weight.grad
    torch.testing.assert_close(g2, 2 * g1)


def test_per_task_cross_entropy_is_reported_unweighted(small_tasks: dict[str, TaskData]) -> None:
    one, two = (_trainer(small_tasks, step_samples=1000) for _ in range(2))
    r1 = one.train_microbatch(12, (0.5, 0.25, 0.25), (1.0, 1.0, 1.0))
    r2 = two.train_microbatch(12, (0.5, 0.25, 0.25), (3.0, 0.5, 1.0))
    assert r1.ce_sum_per_task == pytest.approx(r2.ce_sum_per_task)  # loss weights do not enter
    assert sum(r1.ce_sum_per_task) == pytest.approx(r1.loss * 12, rel=1e-5)
    # An untrained 10-class head: mean cross-entropy near ln(10) per sample.
    mean_ce = [ce / n for ce, n in zip(r1.ce_sum_per_task, r1.samples_per_task, strict=True)]
    assert all(1.5 < x < 3.5 for x in mean_ce)


def test_epoch_sampler_visits_every_sample_once_per_epoch() -> None:
    sampler = _EpochSampler(10, np.random.default_rng(0))
    first, second = sampler.take(10), np.concatenate([sampler.take(3), sampler.take(7)])
    assert sorted(first) == sorted(second) == list(range(10))
    assert sampler.epochs == 1 and len(sampler.take(25)) == 25


def test_trainer_inputs_are_checked(small_tasks: dict[str, TaskData]) -> None:
    trainer = _trainer(small_tasks)
    with pytest.raises(InputError, match="need 3 entries"):
        trainer.train_microbatch(8, (0.5, 0.5), (1, 1, 1))
    with pytest.raises(InputError, match="sum to 1"):
        trainer.train_microbatch(8, (0.5, 0.5, 0.5), (1, 1, 1))
    with pytest.raises(InputError, match="loss_weights"):
        trainer.train_microbatch(8, (0.5, 0.5, 0.0), (1, -1, 1))
    with pytest.raises(InputError, match="samples >= 1"):
        trainer.train_microbatch(0, (0.5, 0.5, 0.0), (1, 1, 1))
    with pytest.raises(ConfigError, match="choose one of: sgd, adam"):
        _trainer(small_tasks, optimizer="lbfgs")
    with pytest.raises(ConfigError, match="model tasks: a"):
        Trainer(build_model({"a": 10}), small_tasks)


def test_training_on_a_clients_view_only_draws_its_samples(small_tasks: dict[str, TaskData]) -> None:
    view = {"digits": client_view(small_tasks["digits"], np.arange(5))}
    trainer = _trainer(view, step_samples=8)
    assert trainer.train_microbatch(12, (1.0,), (1.0,)).samples_per_task == (12,)


def test_training_learns_every_task(small_tasks: dict[str, TaskData]) -> None:
    torch.manual_seed(0)
    trainer = _trainer(small_tasks, step_samples=32)
    before = evaluate(trainer.model, small_tasks)
    for _ in range(240):  # 1,280 samples per task, in microbatches of 16
        trainer.train_microbatch(16, (1 / 3,) * 3, (1.0, 1.0, 1.0))
    after = evaluate(trainer.model, small_tasks)
    assert trainer.model.training  # evaluate restores the mode
    assert all(v < 0.25 for v in before.values()), before
    assert all(v > 0.4 for v in after.values()), after  # chance is 0.1; ~0.84 / 0.55 / 0.88 seen


@pytest.mark.parametrize(("m", "pending_after"), [(1, 0), (8, 4), (23, 12), (32, 16)])
def test_calibration_times_microbatches_that_cross_a_step(
    small_tasks: dict[str, TaskData], m: int, pending_after: int
) -> None:
    # The profile's training line is fitted to the dearest microbatch of each size: one that
    # runs as two passes around an optimizer step. Timing microbatches as they fell mixed
    # cheap (no step) and dear (step, second pass) ones by chance.
    from edge_client.runtime import _crossing_microbatch_s

    trainer = _trainer(small_tasks, step_samples=32)
    trainer.train_microbatch(5, (1 / 3,) * 3, (1, 1, 1))  # leftovers from an earlier size
    steps = trainer.steps
    assert _crossing_microbatch_s(trainer, m, (1 / 3,) * 3, (1, 1, 1)) > 0
    assert trainer.steps == steps + 2  # the flush of the leftovers, then the crossed step
    assert trainer.pending_samples == pending_after
