"""The transit clock: how long a request waited on its way, whatever the requester's clock."""

from __future__ import annotations

import pytest

from edge_client.transit import TransitClock


def test_only_the_transit_beyond_the_requesters_fastest_counts() -> None:
    clock = TransitClock(window_s=60.0)
    skew = 3600.0  # the requester's clock is an hour behind
    assert clock.waited_s("r", 1000.0 - skew, 1000.004) == 0.0  # the first sets the floor
    assert clock.waited_s("r", 1001.0 - skew, 1001.002) == 0.0  # faster: a new floor
    assert clock.waited_s("r", 1002.0 - skew, 1004.502) == pytest.approx(2.5)
    assert clock.waited_s("other", 1003.0 + 7.0, 1003.0) == 0.0  # each requester its own floor
    assert clock.waited_s("r", None, 1005.0) == 0.0  # no sent_at: nothing to go by
    assert clock.waited_s("r", float("nan"), 1005.0) == 0.0


def test_the_floor_outlives_one_window_and_follows_a_stepped_clock_within_two() -> None:
    clock = TransitClock(window_s=10.0)
    clock.waited_s("r", 0.0, 0.001)  # window 0: floor 1 ms
    # Window 1 starts with a request that queued 3 s: the last window's floor still counts.
    assert clock.waited_s("r", 10.0, 13.001) == pytest.approx(3.0)
    # The requester's clock is stepped 5 s back: its requests look 5 s late for a while...
    assert clock.waited_s("r", 14.0 - 5.0, 14.001) == pytest.approx(5.0)
    # ...and no longer once the windows that saw the old clock have passed.
    clock.waited_s("r", 21.0 - 5.0, 21.001)  # window 2
    assert clock.waited_s("r", 31.0 - 5.0, 31.001) == pytest.approx(0.0)  # window 3


def test_it_remembers_a_bounded_number_of_requesters() -> None:
    clock = TransitClock(capacity=3)
    for i in range(10):
        clock.waited_s(f"r{i}", 0.0, 0.001)
    assert len(clock._floors) == 3
    clock.waited_s("r7", 0.0, 0.001)  # heard from again: now the most recent
    clock.waited_s("new", 0.0, 0.001)
    assert set(clock._floors) == {"r9", "r7", "new"}
