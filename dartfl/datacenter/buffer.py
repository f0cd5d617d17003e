"""The experience buffer: finished groups waiting to be trained, by the policy version they
were generated with, and the admission count AReaL's staleness rule reads."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Batch", "ExperienceBuffer"]


@dataclass(frozen=True, slots=True)
class Batch:
    """What one training step takes: its groups' response and extra (tool output) tokens,
    and how many groups of each staleness it holds."""

    response_tokens: float
    extra_tokens: float
    staleness: dict[int, int]


class ExperienceBuffer:
    """Groups by version: version -> [groups, response tokens, extra tokens].

    `accepted` counts the groups that ever entered and were not dropped: AReaL's admission
    rule (eta + version + 1) * B - (accepted + running) reads it.
    """

    def __init__(self) -> None:
        self.by_version: dict[int, list[float]] = {}
        self.groups = 0
        self.accepted = 0

    def put(self, version: int, groups: int, tokens: float, extra_tokens: float = 0.0) -> None:
        entry = self.by_version.setdefault(version, [0.0, 0.0, 0.0])
        entry[0] += groups
        entry[1] += tokens
        entry[2] += extra_tokens
        self.groups += groups
        self.accepted += groups

    def sampleable(self, floor_version: int) -> int:
        """Groups a step at a version that keeps `floor_version` and newer could train on."""
        return sum(int(e[0]) for v, e in self.by_version.items() if v >= floor_version)

    def drop_below(self, floor_version: int) -> list[tuple[int, float]]:
        """Drop every group older than `floor_version`; (groups, response tokens) per version dropped."""
        dropped = []
        for v in [v for v in self.by_version if v < floor_version]:
            groups, tokens, _ = self.by_version.pop(v)
            g = int(groups)
            self.groups -= g
            self.accepted -= g  # a dropped group frees its admission: it is generated again
            dropped.append((g, tokens))
        return dropped

    def take(self, batch_groups: int, version: int) -> Batch:
        """The oldest `batch_groups` groups for a step at `version` (the caller checked there are)."""
        need = batch_groups
        tokens = extra = 0.0
        staleness: dict[int, int] = {}
        for v in sorted(self.by_version):
            groups, toks, ext = self.by_version[v]
            take = min(need, int(groups))
            part, ext_part = toks * take / groups, ext * take / groups
            tokens += part
            extra += ext_part
            staleness[version - v] = staleness.get(version - v, 0) + take
            if take == groups:
                del self.by_version[v]
            else:
                self.by_version[v] = [groups - take, toks - part, ext - ext_part]
            need -= take
            if need == 0:
                break
        self.groups -= batch_groups
        return Batch(tokens, extra, staleness)
