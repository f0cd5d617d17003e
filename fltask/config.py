"""The federated run's configuration: Flower's `run_config` parsed into one validated dataclass.

Flower hands the ServerApp and every ClientApp the same flat, kebab-case `run_config` (the
defaults of `[tool.flwr.app.config]` in pyproject.toml, overridden by `flwr run --run-config`).
This module is the one place that reads it; server and client both use it.
Lists are comma-separated strings because Flower's config values are scalars.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dartfl.errors import ConfigError
from dartfl.policies import make_policy
from dartfl.policies.shares import LOSS_WEIGHTINGS
from dartfl.types import DeviceProfile

# The longest round deadline, seconds: a device agent refuses a round order past it
# (edge_client.round_messages), so a run config is refused before the run starts.
MAX_DEADLINE_S = 86_400.0

__all__ = ["NO_STORE", "FlConfig", "split_list"]

NO_STORE = "none"  # run config `store = "none"`: the run is not recorded


def split_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class FlConfig:
    """Every knob of a federated run. Field `x_y` is run-config key `x-y`."""

    num_server_rounds: int = 10
    policy: str = "dart"
    loss_weighting: str = ""  # "": the policy's natural weighting (dart: demand, baselines: uniform)
    slo_ms: float = 250.0
    round_deadline_s: float = 8.0  # virtual (simulation) or real (deployment) training time per round
    round_timeout_s: float = 600.0  # how long the server waits for replies (wall clock)
    node_wait_s: float = 300.0  # how long the server waits for min-available-nodes
    min_available_nodes: int = 2
    min_train_nodes: int = 1  # fewer replies than this: the round is skipped (weights kept)
    tasks: str = "digits,fashion,uci-digits"
    workloads: str = "mmpp,gamma,hawkes"  # client i replays workloads[i mod n]
    target_loads: str = "0.25"  # client i's mean inference load, loads[i mod n]
    favourite_tasks: str = ""  # client i's most demanded task, [i mod n] ("": rotate by i)
    zipf: float = 1.5  # demand skew of every client's task mix
    profile: str = "pi5"
    profile_cores: int = 0  # 0: every core of the profile; 1: one-core time sharing (as before cores)
    period_s: float = 0.25
    round_target_samples: int = 0
    max_train_per_task: int = 3000
    max_test_per_task: int = 500
    dirichlet_alpha: float = 0.0  # 0: IID partitions, else label-skewed Dirichlet(alpha)
    model_width: float = 1.0
    learning_rate: float = 0.05
    lr_decay: float = 1.0  # round r trains at learning-rate * lr-decay^(r-1)
    step_samples: int = 32
    seed: int = 1
    checkpoint_dir: str = ""  # "": no checkpoints
    results_file: str = ""  # "": no JSON results file
    store: str = ""  # "": the default run store of the ServerApp's host; "none": no records
    run_label: str = ""

    def __post_init__(self) -> None:
        if self.num_server_rounds < 1:
            raise ConfigError(f"num-server-rounds must be >= 1, got {self.num_server_rounds}")
        make_policy(self.policy, self.loss_weighting or None)  # raises with the valid names
        if self.loss_weighting and self.loss_weighting not in LOSS_WEIGHTINGS:
            raise ConfigError(
                f"loss-weighting {self.loss_weighting!r} is unknown; valid: {', '.join(LOSS_WEIGHTINGS)}"
            )
        positive = ("slo_ms", "round_deadline_s", "round_timeout_s", "period_s", "model_width", "lr_decay")
        for name in (*positive, "learning_rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name.replace('_', '-')} must be a finite number > 0, got {value}")
        if self.round_deadline_s > MAX_DEADLINE_S:
            raise ConfigError(
                f"round-deadline-s must be at most {MAX_DEADLINE_S:.0f} s (a day), "
                f"got {self.round_deadline_s}"
            )
        for name, least in (
            ("step_samples", 1),
            ("max_train_per_task", 1),
            ("max_test_per_task", 1),
            ("seed", 0),
            ("round_target_samples", 0),
        ):
            if getattr(self, name) < least:
                raise ConfigError(f"{name.replace('_', '-')} must be >= {least}, got {getattr(self, name)}")
        if not (math.isfinite(self.node_wait_s) and self.node_wait_s >= 0):
            raise ConfigError(f"node-wait-s must be a finite number >= 0, got {self.node_wait_s}")
        if self.min_available_nodes < 1 or self.min_train_nodes < 1:
            raise ConfigError(
                "min-available-nodes and min-train-nodes must be >= 1, got "
                f"{self.min_available_nodes} and {self.min_train_nodes}"
            )
        self._check_names()
        for fav in split_list(self.favourite_tasks):
            if fav not in self.task_names:
                raise ConfigError(f"favourite task {fav!r} is not one of the tasks {list(self.task_names)}")
        for load in self.loads:
            if not (math.isfinite(load) and load > 0):
                raise ConfigError(f"target-loads must be numbers > 0, got {self.target_loads!r}")
        skews = (self.zipf, self.dirichlet_alpha)
        if not all(math.isfinite(x) and x >= 0 for x in skews):
            raise ConfigError(
                f"zipf and dirichlet-alpha must be >= 0, got {self.zipf}, {self.dirichlet_alpha}"
            )

    def _check_names(self) -> None:
        """Tasks, workload generators and the device profile must be ones this build knows;
        caught here, before a simulation starts its SuperLink and Ray, not in round 1."""
        from dartfl.profiles import BUILTIN_PROFILE_NAMES
        from fltask.data import TASK_NAMES
        from workloads.registry import GENERATORS

        tasks = self.task_names
        if not tasks:
            raise ConfigError("tasks must name at least one task, e.g. 'digits,fashion'")
        unknown = [t for t in tasks if t not in TASK_NAMES]
        if unknown or len(set(tasks)) != len(tasks):
            raise ConfigError(
                f"tasks {self.tasks!r}: {'unknown ' + ', '.join(unknown) if unknown else 'a task twice'}; "
                f"built-in tasks: {', '.join(TASK_NAMES)}"
            )
        gens = split_list(self.workloads)
        if not gens or any(g not in GENERATORS for g in gens):
            raise ConfigError(f"workloads {self.workloads!r}: valid generators are {', '.join(GENERATORS)}")
        if self.profile not in BUILTIN_PROFILE_NAMES:
            raise ConfigError(
                f"profile {self.profile!r} is unknown; built-in profiles: {', '.join(BUILTIN_PROFILE_NAMES)}"
            )
        self.device_profile()  # profile-cores within the profile's cores

    def device_profile(self) -> DeviceProfile:
        """The virtual device: the built-in profile on `profile-cores` of its cores (0: all)."""
        from dartfl.profiles import get_profile

        profile = get_profile(self.profile)
        n = profile.cores.count
        if not 0 <= self.profile_cores <= n:
            raise ConfigError(
                f"profile-cores must lie in 0..{n} for profile {self.profile!r} (0: all of them), "
                f"got {self.profile_cores}"
            )
        return profile.with_cores(self.profile_cores) if self.profile_cores else profile

    def round_learning_rate(self, server_round: int) -> float:
        """The learning rate of round `server_round` (1-based) under the per-round decay."""
        return self.learning_rate * self.lr_decay ** max(0, server_round - 1)

    @property
    def task_names(self) -> tuple[str, ...]:
        return split_list(self.tasks)

    @property
    def store_path(self) -> Path | None:
        """Where the ServerApp records the run: `store`; for "" the default run store of the
        host it runs on ($DARTFL_STORE, else ~/.local/share/dartfl/runs.sqlite), as every
        dartfl command records by default; None for "none"."""
        from dartfl.paths import default_store_path

        if self.store.strip().lower() == NO_STORE:
            return None
        return Path(self.store).expanduser() if self.store else default_store_path()

    @property
    def loads(self) -> tuple[float, ...]:
        try:
            return tuple(float(x) for x in split_list(self.target_loads)) or (0.5,)
        except ValueError:
            raise ConfigError(
                f"target-loads must be comma-separated numbers, got {self.target_loads!r}"
            ) from None

    @property
    def weighting(self) -> str:
        """The loss weighting in force: the explicit one, else the policy's natural one."""
        from dartfl.policies import natural_loss_weighting

        return self.loss_weighting or natural_loss_weighting(self.policy)

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> FlConfig:
        """Parse Flower's run_config; unknown keys are ignored (Flower may add its own)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = f.name.replace("_", "-")
            if key not in run_config:
                continue
            raw = run_config[key]
            kind: type[Any] = type(f.default)
            try:
                values[f.name] = kind(raw) if kind is not str else str(raw)
            except (TypeError, ValueError):
                raise ConfigError(f"run config {key} = {raw!r}: expected a {kind.__name__}") from None
        return cls(**values)

    def to_run_config(self) -> dict[str, int | float | str]:
        """The kebab-case mapping Flower carries (the inverse of `from_run_config`)."""
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}
