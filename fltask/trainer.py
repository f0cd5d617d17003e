"""Training in non-preemptible microbatches with gradient accumulation, and test accuracy.

The allocator hands the device small training microbatches (m samples, task shares y_k,
loss weights w_k). One microbatch runs to completion once started, so it must be short; one
optimizer step, to be efficient, should see more samples. So gradients accumulate across
microbatches and the optimizer steps every `step_samples` samples.

Loss of one optimizer step over its S = `step_samples` samples (n_k of them from task k):

    L = (1 / S) * sum_k w_k * sum_{i in task k} CE_i  =  sum_k w_k * (n_k / S) * mean_CE_k

Each microbatch back-propagates its unnormalised part sum_k w_k * sum_i CE_i; at the step the
gradients are divided by S. A microbatch that crosses a step boundary runs as two passes: the
samples that complete the step, the step, then the rest. So the optimizer takes the same
steps, of S samples each, however the allocator cuts its microbatches (the model has no batch
normalisation, so a sample's gradient does not depend on its batch mates). Stepping after the
microbatch instead, on all it brought, would make steps of up to 2S - 1 samples: a policy
that cuts 23-sample microbatches would take a third fewer steps than one that cuts 32, and
learn less from the same samples (measured in docs/experiments.md). Only the end of a round
(`flush`) steps on fewer than S samples, normalised by what it has.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (the conventional name)

from dartfl.errors import ConfigError, InputError
from dartfl.executor.split import SampleSplitter
from fltask.data import TaskData
from fltask.model import MultitaskCNN

__all__ = ["OPTIMIZERS", "MicrobatchResult", "Trainer", "evaluate"]

_OptimizerFactory = Callable[[list[torch.nn.Parameter], float], torch.optim.Optimizer]
OPTIMIZERS: dict[str, tuple[float, _OptimizerFactory]] = {
    # name: (default learning rate, factory)
    "sgd": (0.05, lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9)),
    "adam": (1e-3, lambda params, lr: torch.optim.Adam(params, lr=lr)),
}


@dataclass(frozen=True)
class MicrobatchResult:
    """What one microbatch did. `samples_per_task` is indexed like `Trainer.task_names`.

    `loss` is the microbatch's weighted loss per sample, sum_k w_k sum_i CE_i / samples;
    `ce_sum_per_task` the unweighted cross-entropy summed over each task's samples (what an FL
    round reports so the server can tell which tasks are still being learnt);
    `stepped` says whether the optimizer stepped during it (once, or more for a microbatch
    longer than `step_samples`).
    """

    samples_per_task: tuple[int, ...]
    loss: float
    duration_s: float
    stepped: bool
    ce_sum_per_task: tuple[float, ...]


class _EpochSampler:
    """Draws sample indices without replacement, reshuffling at the end of every epoch."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n = n
        self.rng = rng
        self.order = rng.permutation(n)
        self.pos = 0
        self.epochs = 0

    def take(self, count: int) -> np.ndarray:
        out = []
        while count > 0:
            if self.pos == self.n:
                self.order, self.pos = self.rng.permutation(self.n), 0
                self.epochs += 1
            chunk = self.order[self.pos : self.pos + count]
            self.pos += len(chunk)
            count -= len(chunk)
            out.append(chunk)
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


class Trainer:
    """Runs one training microbatch at a time on a MultitaskCNN.

    Task shares and loss weights are sequences indexed like `task_names` (the order of
    `tasks`). Each task's samples come from its own reshuffled epochs; the split of a
    microbatch among tasks follows the shares exactly in the long run (SampleSplitter).
    """

    def __init__(
        self,
        model: MultitaskCNN,
        tasks: Mapping[str, TaskData],
        *,
        lr: float | None = None,
        optimizer: str = "sgd",
        step_samples: int = 32,
        seed: int = 0,
    ) -> None:
        if not tasks:
            raise ConfigError("a trainer needs at least one task")
        for name, data in tasks.items():
            classes = model.task_classes.get(name)
            if classes != data.num_classes:
                raise ConfigError(
                    f"task {name!r} has {data.num_classes} classes but the model's head has "
                    f"{'none' if classes is None else classes}; model tasks: {', '.join(model.task_classes)}"
                )
        if optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
        default_lr, factory = OPTIMIZERS[optimizer]
        lr = default_lr if lr is None else lr
        if not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
            raise ConfigError(f"learning rate must be a finite number > 0, got {lr!r}")
        if not (isinstance(step_samples, int) and step_samples >= 1):
            raise ConfigError(f"step_samples must be an integer >= 1, got {step_samples!r}")
        self.model = model
        self.tasks = dict(tasks)
        self.task_names = tuple(self.tasks)
        self.step_samples = step_samples
        self.optimizer = factory(list(model.parameters()), float(lr))
        rngs = np.random.SeedSequence(seed).spawn(len(self.tasks))
        self._samplers = [
            _EpochSampler(d.num_train, np.random.default_rng(s))
            for d, s in zip(self.tasks.values(), rngs, strict=True)
        ]
        self._splitter = SampleSplitter(len(self.tasks))
        self.pending_samples = 0  # accumulated since the last optimizer step
        self.steps = 0
        self.samples_trained = 0
        self.optimizer.zero_grad(set_to_none=True)

    def train_microbatch(
        self, samples: int, task_shares: Sequence[float], loss_weights: Sequence[float]
    ) -> MicrobatchResult:
        """Forward and backward `samples` samples mixed by `task_shares`, stepping the optimizer
        each time `step_samples` have accumulated (module docstring)."""
        start = time.perf_counter()
        shares, weights = self._check(samples, task_shares, loss_weights)
        self.model.train()
        counts = [0] * len(self.tasks)
        ce_sums = [0.0] * len(self.tasks)
        weighted = 0.0
        stepped = False
        left = samples
        while left > 0:
            part = min(left, self.step_samples - self.pending_samples)
            weighted += self._accumulate(part, shares, weights, counts, ce_sums)
            left -= part
            if self.pending_samples >= self.step_samples:
                self._step()
                stepped = True
        self.samples_trained += samples
        return MicrobatchResult(
            samples_per_task=tuple(counts),
            loss=weighted / samples,
            duration_s=time.perf_counter() - start,
            stepped=stepped,
            ce_sum_per_task=tuple(ce_sums),
        )

    def _accumulate(
        self,
        samples: int,
        shares: Sequence[float],
        weights: Sequence[float],
        counts: list[int],
        ce_sums: list[float],
    ) -> float:
        """One forward and backward pass over `samples` samples; adds each task's sample count
        and cross-entropy to `counts` and `ce_sums`; returns the weighted loss sum."""
        total = torch.zeros(())
        for k, (name, count) in enumerate(
            zip(self.task_names, self._splitter.split(samples, shares), strict=True)
        ):
            counts[k] += count
            if count == 0:
                continue
            data = self.tasks[name]
            idx = self._samplers[k].take(count)
            x = torch.from_numpy(data.x_train[idx])  # fancy indexing copies: a writable array
            y = torch.from_numpy(data.y_train[idx])
            ce_sum = F.cross_entropy(self.model(x, name), y, reduction="sum")
            total = total + weights[k] * ce_sum
            ce_sums[k] += float(ce_sum.detach())
        total.backward()
        self.pending_samples += samples
        return float(total.detach())

    def set_learning_rate(self, lr: float) -> None:
        """Train from now on at `lr` (an FL round's rate under the server's decay)."""
        if not (math.isfinite(lr) and lr > 0):
            raise ConfigError(f"learning rate must be a finite number > 0, got {lr!r}")
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def set_step_samples(self, step_samples: int) -> None:
        """Step every `step_samples` samples from now on (an FL round's setting). Only between
        steps: the samples already accumulated were meant for a step of the old size."""
        if not (isinstance(step_samples, int) and step_samples >= 1):
            raise ConfigError(f"step_samples must be an integer >= 1, got {step_samples!r}")
        if self.pending_samples:
            raise ConfigError(
                f"cannot change step_samples with {self.pending_samples} samples accumulated; flush first"
            )
        self.step_samples = step_samples

    def flush(self) -> bool:
        """Step on whatever has accumulated (end of an FL round); False if nothing had."""
        if self.pending_samples == 0:
            return False
        self._step()
        return True

    def _step(self) -> None:
        scale = 1.0 / self.pending_samples  # step_samples, except at a round's flush
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.pending_samples = 0
        self.steps += 1

    def _check(
        self, samples: int, task_shares: Sequence[float], loss_weights: Sequence[float]
    ) -> tuple[list[float], list[float]]:
        k = len(self.task_names)
        if not (isinstance(samples, int | np.integer) and samples >= 1):
            raise InputError(f"a microbatch needs an integer number of samples >= 1, got {samples!r}")
        shares = [float(y) for y in task_shares]
        weights = [float(w) for w in loss_weights]
        if len(shares) != k or len(weights) != k:
            raise InputError(
                f"task_shares and loss_weights need {k} entries (tasks {', '.join(self.task_names)}), "
                f"got {len(shares)} and {len(weights)}"
            )
        if not all(math.isfinite(y) and y >= 0 for y in shares) or abs(sum(shares) - 1.0) > 1e-6:
            raise InputError(f"task_shares must be >= 0 and sum to 1, got {shares}")
        if not all(math.isfinite(w) and w >= 0 for w in weights):
            raise InputError(f"loss_weights must be finite and >= 0, got {weights}")
        return shares, weights


def evaluate(model: MultitaskCNN, tasks: Mapping[str, TaskData], batch_size: int = 500) -> dict[str, float]:
    """Test-set accuracy per task (no gradients; the model's train/eval mode is restored)."""
    was_training = model.training
    model.eval()
    accuracy = {}
    try:
        with torch.no_grad():
            for name, data in tasks.items():
                correct = 0
                for lo in range(0, data.num_test, batch_size):
                    x = torch.tensor(data.x_test[lo : lo + batch_size])
                    pred = model(x, name).argmax(dim=1).numpy()
                    correct += int((pred == data.y_test[lo : lo + batch_size]).sum())
                accuracy[name] = correct / data.num_test
    finally:
        model.train(was_training)
    return accuracy
