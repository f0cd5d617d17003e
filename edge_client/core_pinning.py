"""Which CPUs each lane of a split device runs on, and pinning a lane's thread to them.

The serving lane takes the first k of the CPUs the agent may use (`os.sched_getaffinity`),
the training lane the rest. On Linux `os.sched_setaffinity(0, cpus)` pins the calling thread
only (0 names the caller), and a thread inherits its creator's mask when it is created. So:
- ONNX Runtime builds its intra-op pool when a session is created: the serving lane pins its
  own thread first and then builds its sessions (`InferenceEngine.set_threads`), and the
  pool's workers start on the serving CPUs;
- PyTorch's OpenMP pool is created by the first parallel region of the thread that trains
  and keeps its workers afterwards: the training lane pins its thread before its first step,
  so the pool starts on the training CPUs. A later change of k re-pins the lane's thread and
  resizes the pool (`torch.set_num_threads`), but OpenMP workers that already exist keep the
  mask they started with; only the count follows k exactly.
Where the call does not exist (macOS, Windows) or is refused (a cpuset narrower than asked, a
container without CAP_SYS_NICE over another's threads), pinning is skipped: the thread counts
still follow k, and the reason is logged once and reported (`PinResult.reason`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from dartfl.errors import ConfigError

__all__ = ["PinResult", "available_cpus", "lane_cpus", "pin_current_thread"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PinResult:
    cpus: tuple[int, ...]  # the CPUs asked for
    pinned: bool
    reason: str = ""  # why not, where `pinned` is False


def available_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on, in order (all of them where affinity is unknown)."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is not None:
        return tuple(sorted(getter(0)))
    return tuple(range(os.cpu_count() or 1))


def lane_cpus(inference_cores: int, cpus: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(serving CPUs, training CPUs) for a split with `inference_cores` serving: the first k
    CPUs serve, the rest train (none when k is all of them: time sharing)."""
    if not 1 <= inference_cores <= len(cpus):
        raise ConfigError(
            f"inference cores must lie in 1..{len(cpus)} (the CPUs {cpus}), got {inference_cores}"
        )
    return cpus[:inference_cores], cpus[inference_cores:]


def pin_current_thread(cpus: tuple[int, ...]) -> PinResult:
    """Pin the calling thread to `cpus` where the OS allows it."""
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        return PinResult(cpus, False, "os.sched_setaffinity does not exist on this OS")
    if not cpus:
        return PinResult(cpus, False, "no CPUs to pin to")
    try:
        setter(0, cpus)
    except OSError as exc:
        return PinResult(cpus, False, f"sched_setaffinity refused: {exc}")
    return PinResult(cpus, True)
