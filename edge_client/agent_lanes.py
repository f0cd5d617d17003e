"""What a split agent's lane threads hold: the CPUs each pins to and the size of its pool.

`LaneThreads.switch` runs on the lane's own thread when the executor hands it a
`CoreSwitch`, and accounts it in the executor; `resize` pins that thread
(edge_client/core_pinning.py) and resizes the lane's pool, ONNX Runtime sessions with k
intra-op threads for the serving lane (built on the pinned thread, so their pool inherits its
CPUs), `torch.set_num_threads` for the training lane.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from dartfl.executor import TRAINING_LANE, CoreSwitch, DeviceExecutor
from edge_client.core_pinning import available_cpus, lane_cpus, pin_current_thread

if TYPE_CHECKING:
    from edge_client.runtime import ModelRuntime

__all__ = ["LaneThreads"]

log = logging.getLogger(__name__)


class LaneThreads:
    """`lock` is the agent's, which serialises `device`."""

    def __init__(
        self,
        runtime: ModelRuntime,
        device: DeviceExecutor[Any],
        lock: threading.Condition,
        cores: int,
        training_threads: int,
    ) -> None:
        self.runtime = runtime
        self.device, self.lock = device, lock
        self.cores = cores  # N, the profile's
        self.cpus = available_cpus()
        self.pinning: dict[str, str] = {}  # per lane: "" pinned, else why not (at its last switch)
        self._torch_threads = training_threads

    def switch(self, switch: CoreSwitch) -> None:
        """Resize the calling lane, then tell the executor (and the lanes waiting on it)."""
        t0 = time.monotonic()
        self.resize(switch)
        with self.lock:
            self.device.switch_done(switch, time.monotonic(), time.monotonic() - t0)
            self.lock.notify_all()

    def resize(self, switch: CoreSwitch) -> None:
        """Move the calling lane's thread to its new cores: pin it, resize its pool."""
        k = switch.cores_to
        if k == 0:  # a lane that gives up every core idles: nothing to resize
            return
        serving = switch.lane != TRAINING_LANE
        n = self.cores
        if n > len(self.cpus):
            reason = f"the profile has {n} cores, this process may use {len(self.cpus)} CPUs"
        else:
            inference_cpus, training_cpus = lane_cpus(k if serving else n - k, self.cpus[:n])
            reason = pin_current_thread(inference_cpus if serving else training_cpus).reason
        if reason and self.pinning.get(switch.lane) != reason:
            log.warning("%s lane not pinned: %s", switch.lane, reason)
        self.pinning[switch.lane] = reason
        if serving:
            self.runtime.set_inference_threads(k)
        else:
            self.torch_threads(k)

    def prepare(self) -> None:
        """Build the serving sessions for every core count the serving lane may get, each on
        the CPUs it would run on, so that no core move builds one on the lane (issue 15: a
        first build took 0.24 s on the 2-core VM, longer than a 150 ms SLO)."""
        n = self.cores
        if n > len(self.cpus):
            return  # it cannot pin: resize says why at the first switch
        serving = self.runtime.engine.threads
        try:
            for k in range(n, 0, -1):
                pin_current_thread(lane_cpus(k, self.cpus[:n])[0])
                self.runtime.set_inference_threads(k)
        finally:
            pin_current_thread(self.cpus)
            self.runtime.set_inference_threads(serving)

    def torch_threads(self, n: int) -> None:
        """Train with `n` threads from the next step (a no-op when it already does)."""
        if n != self._torch_threads:
            self.runtime.set_training_threads(n)
            self._torch_threads = n
