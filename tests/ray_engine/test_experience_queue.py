"""The Ray engine's experience queue, run here without Ray: groups past the staleness bound
leave at every admission check, not only when the trainer takes a batch."""

from __future__ import annotations

from typing import Any

from ray_engine.actors import ExperienceQueue


def _groups(version: int, n: int) -> list[dict[str, Any]]:
    return [{"version": version} for _ in range(n)]


def test_stale_groups_free_their_admissions_while_the_trainer_takes_nothing() -> None:
    # A trainer lent to rollout (verl-dynamic) takes no batch; groups past the bound used to
    # hold their admissions until it did, so nothing new was generated and the reclaim
    # threshold of sampleable groups was never reached.
    queue = ExperienceQueue.__ray_actor_class__(batch=4, eta=1)  # type: ignore[attr-defined]
    queue.put(_groups(0, 4) + _groups(2, 2))
    left, buffered, dropped, sampleable = queue.capacity(2, 0)  # version 0 is 2 > eta behind
    assert (buffered, dropped, sampleable) == (2, 4, 2)
    assert left == (1 + 2 + 1) * 4 - 2  # only the two live groups count as accepted
    assert queue.take(2) is None  # two groups, a batch of four
    queue.put(_groups(2, 2))
    assert [g["version"] for g in queue.take(2)] == [2, 2, 2, 2]
