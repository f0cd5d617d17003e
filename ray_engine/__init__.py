"""The datacenter mode's real engine: Ray actors with switchable roles on a toy RL task.

An adapter package, like the device agent: it imports Ray and PyTorch at module level and
turns their objects into the pure core's values (dartfl.datacenter: the policy registry, the
worker split decision and its rate estimates, verl-dynamic's lending rule). The CLI imports
it only for `dartfl dc run`. Run anything that starts Ray inside a loopback-only network
namespace (scripts/loopback-run): Ray probes outside addresses at start-up.
"""

from ray_engine.books import RayRun, RayRunConfig
from ray_engine.engine import run_ray

__all__ = ["RayRun", "RayRunConfig", "run_ray"]
