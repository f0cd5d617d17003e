"""Which role each GPU holds: rollout (dedicated engines), hybrid (trainer GPUs lent to
rollout, verl's hybrid replicas), train, or dead while it switches. Every GPU holds exactly
one; the simulator checks the sum on every tick."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ROLES", "GpuRoles"]

ROLES = ("rollout", "hybrid", "train")


@dataclass
class GpuRoles:
    """GPU counts per role, and the switches in flight: (ready at, destination role, GPUs)."""

    gpus: int
    rollout: int = 0
    hybrid: int = 0
    train: int = 0
    dead: list[tuple[float, str, int]] = field(default_factory=list)
    pending_to_rollout: int = 0  # trainer GPUs promised to rollout once the running step ends

    @property
    def switching(self) -> int:
        return sum(d[2] for d in self.dead)

    @property
    def decoding(self) -> int:
        """GPUs running rollout engines (dedicated and lent)."""
        return self.rollout + self.hybrid

    def consistent(self) -> bool:
        return self.rollout + self.hybrid + self.train + self.switching == self.gpus

    def start_switch(self, now: float, dead_s: float, role: str, gpus: int) -> None:
        """`gpus` GPUs, already taken from their old role, land in `role` after `dead_s`."""
        self.dead.append((now + dead_s, role, gpus))

    def land(self, now: float) -> list[str]:
        """Switches whose dead time is over join their role; returns the roles that grew."""
        if not self.dead:
            return []
        keep, landed = [], []
        for ready, role, k in self.dead:
            if ready <= now + 1e-9:
                setattr(self, role, getattr(self, role) + k)
                landed.append(role)
            else:
                keep.append((ready, role, k))
        self.dead = keep
        return landed

    def next_landing(self) -> float:
        return min((d[0] for d in self.dead), default=float("inf"))
