"""How a device executor accounts: the settings a driver chooses (`ExecutorConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from dartfl.errors import ConfigError

__all__ = ["ExecutorConfig"]


@dataclass(frozen=True)
class ExecutorConfig:
    """How the executor accounts. `max_decisions` bounds the decision times it keeps (None:
    all of them, for a finite simulation); `record_periods` keeps a row per control period;
    `deadline_admission` refuses a request that cannot be answered within its SLO.
    `lanes`: how many lanes the driver runs, 1 (the serving lane only: the device is always
    time-shared on all its cores) or 2 (serving and training lanes: its cores can be split).
    `concurrent_steps`: with two lanes, may the serving lane start a step while the training
    lane runs one (False for a driver that trains one model, as the agent does).
    `batch_hold_s`: how long a few waiting requests may be held back under dense traffic to
    share a batch (dartfl/executor/batch_hold.py; 0: take work at once)."""

    period_s: float = 0.25
    rate_time_constant_s: float = 2.0
    record_periods: bool = False
    max_decisions: int | None = None
    deadline_admission: bool = True  # refuse what cannot make its SLO (dartfl/executor/admission.py)
    # With deadline admission: the share of admitted requests that may miss, steered by a
    # margin on the bound (AdmissionMargin; None: the bound alone, as the simulator plans).
    admission_miss_target: float | None = None
    lanes: int = 1
    concurrent_steps: bool = True
    batch_hold_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ConfigError(f"control period must be > 0 s, got {self.period_s}")
        if self.lanes not in (1, 2):
            raise ConfigError(
                f"an executor drives 1 lane (time sharing) or 2 (split cores), got {self.lanes}"
            )
        if not 0.0 <= self.batch_hold_s <= self.period_s:
            raise ConfigError(
                f"batch_hold_s must be in [0, period_s = {self.period_s:g}], got {self.batch_hold_s}"
            )
        if self.max_decisions is not None and self.max_decisions < 1:
            raise ConfigError(f"max_decisions must be >= 1 or None, got {self.max_decisions}")
        target = self.admission_miss_target
        if target is not None and not 0.0 < target < 1.0:
            raise ConfigError(f"admission_miss_target must be in (0, 1) or None, got {target}")
