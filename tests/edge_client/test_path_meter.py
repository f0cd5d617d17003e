"""The network thread's meter: what a request costs inside and between its handlers."""

from __future__ import annotations

import threading
import time

from edge_client.path_meter import FLUSH_EVERY, NetworkThreadMeter


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_it_splits_the_threads_cpu_into_ingress_and_receive_and_hands_sums_over_under_the_lock() -> None:
    lock = threading.Lock()
    told: list[tuple[int, float, float, bool]] = []
    meter = NetworkThreadMeter(lambda n, rx, ing: told.append((n, rx, ing, lock.locked())), lock)
    for _ in range(FLUSH_EVERY + 1):
        _spin(2e-4)  # "receiving" the next message
        entered = meter.entered()
        _spin(1e-4)  # the handler
        meter.left(entered)
    assert len(told) == 1  # one hand-over per FLUSH_EVERY requests
    n, receive, ingress, locked = told[0]
    assert n == FLUSH_EVERY and locked
    # The first message has no "since the last handler": FLUSH_EVERY - 1 receives are counted.
    assert 0.9 * 2e-4 * (n - 1) < receive < 3 * 2e-4 * n
    assert 0.9 * 1e-4 * n < ingress < 3 * 1e-4 * n


def test_a_new_network_thread_starts_its_own_marks() -> None:
    told: list[tuple[int, float, float]] = []
    meter = NetworkThreadMeter(lambda *sums: told.append(sums), threading.Lock())
    meter.left(meter.entered())

    def on_new_thread() -> None:  # paho's thread after a reconnect: another CPU clock
        for _ in range(FLUSH_EVERY - 1):
            meter.left(meter.entered())

    worker = threading.Thread(target=on_new_thread)
    worker.start()
    worker.join()
    ((n, receive, _),) = told
    assert n == FLUSH_EVERY and 0.0 <= receive < 0.05  # no difference of two threads' clocks
