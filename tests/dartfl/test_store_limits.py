"""The bounds on stored telemetry: which snapshots are refused (dartfl.store.limits), what the
store refuses to write, and the pruning and trimming that keep the table bounded."""

from __future__ import annotations

import math

import pytest

from dartfl.errors import ConfigError
from dartfl.store import RunStore, TelemetryRow
from dartfl.store.limits import TelemetryAdmission, TelemetryLimits
from dartfl.store.telemetry import MAX_PAYLOAD_BYTES

NOW = 1_700_000_000.0


def _admission(**limits: object) -> TelemetryAdmission:
    return TelemetryAdmission(TelemetryLimits(**limits), {"pi-1": 10})  # type: ignore[arg-type]


def test_a_snapshot_dated_past_the_bound_ahead_of_the_clock_is_refused() -> None:
    # t = 9.9e9 passes the decoder (a Unix time), and became the device's newest for good.
    admission = _admission(max_ahead_s=300.0)
    assert admission.refusal("pi-1", 9.9e9, NOW) == "ahead"
    assert admission.refusal("pi-1", NOW + 300.5, NOW) == "ahead"
    assert admission.refusal("pi-1", NOW + 299.5, NOW) is None  # a clock a few minutes fast is kept


def test_a_snapshot_older_than_the_retention_is_refused_unless_everything_is_kept() -> None:
    assert _admission(retention_s=3600.0).refusal("pi-1", NOW - 3601, NOW) == "behind"
    assert _admission(retention_s=3600.0).refusal("pi-1", NOW - 3599, NOW) is None
    assert _admission(retention_s=None).refusal("pi-1", 0.0, NOW) is None


def test_a_new_device_past_the_device_limit_is_refused_a_known_one_is_not() -> None:
    admission = _admission(max_devices=2)
    admission.admitted("pi-2")
    assert admission.refusal("pi-3", NOW, NOW) == "devices"
    assert admission.refusal("pi-1", NOW, NOW) is None
    admission.recount({"pi-1": 3})  # pi-2 pruned away and nothing of it pending: its place is free
    assert admission.refusal("pi-3", NOW, NOW) is None


def test_devices_past_their_row_limit_and_its_slack_are_the_ones_to_trim() -> None:
    admission = TelemetryAdmission(TelemetryLimits(max_rows_per_device=100), {"a": 100, "b": 104})
    assert admission.over_limit() == []  # within the 5% slack: no trim on every write
    admission.admitted("b")
    admission.admitted("b")
    assert admission.over_limit() == ["b"]
    admission.trimmed("b", 100)
    assert admission.over_limit() == []


@pytest.mark.parametrize(
    ("limits", "complaint"),
    [
        ({"retention_s": 0.0}, "retention must be > 0 s"),
        ({"retention_s": math.inf}, "retention must be > 0 s"),
        ({"max_ahead_s": -1.0}, "max_ahead_s must be a finite number"),
        ({"max_ahead_s": math.nan}, "max_ahead_s must be a finite number"),
        ({"max_rows_per_device": 0}, "max_rows_per_device must be an integer >= 1, got 0"),
        ({"max_devices": 1.5}, "max_devices must be an integer >= 1, got 1.5"),
    ],
)
def test_limits_that_bound_nothing_are_refused_naming_the_value(
    limits: dict[str, float], complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        TelemetryLimits(**limits)  # type: ignore[arg-type]


def test_prune_window_keeps_a_clock_a_little_fast_and_drops_the_future() -> None:
    assert TelemetryLimits(retention_s=60.0, max_ahead_s=300.0).prune_window(NOW) == (NOW - 60, NOW + 300)
    assert TelemetryLimits(retention_s=None).prune_window(NOW)[0] == -math.inf


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("inference_share", 7.5, "inference_share must be a share in"),
        ("slo_attainment", -3.0, "slo_attainment must be a share in"),
        ("backlog", -1, "backlog must be a count"),
        ("train_samples", 2.5, "train_samples must be a count"),
        ("p99_ms", -4.0, "p99_ms must be a duration"),
    ],
)
def test_the_store_refuses_values_no_device_can_report(
    tmp_store: RunStore, field: str, value: float, complaint: str
) -> None:
    # They were stored as sent; the decoder refuses them on the wire, the store for any writer.
    with pytest.raises(ConfigError, match=complaint):
        tmp_store.add_telemetry([TelemetryRow("pi-1", NOW, **{field: value})])  # type: ignore[arg-type]
    assert tmp_store.telemetry_devices() == []


def test_the_store_refuses_a_time_outside_the_unix_range_and_an_oversized_payload(
    tmp_store: RunStore,
) -> None:
    with pytest.raises(ConfigError, match="t_s must be a Unix time"):
        tmp_store.add_telemetry([TelemetryRow("pi-1", 2e10)])
    with pytest.raises(ConfigError, match=f"over the {MAX_PAYLOAD_BYTES}"):
        tmp_store.add_telemetry([TelemetryRow("pi-1", NOW, payload={"blob": "x" * (1 << 20)})])
    assert tmp_store.add_telemetry([TelemetryRow("pi-1", NOW, inference_share=1.0, payload={"ok": 1})]) == 1


def test_pruning_removes_rows_dated_in_the_future_too(tmp_store: RunStore) -> None:
    # A row dated 9.9e9 stayed the device's newest: no retention ever reached it.
    tmp_store.add_telemetry([TelemetryRow("pi-1", t) for t in (NOW - 7200, NOW - 10, NOW, 9.9e9)])
    assert tmp_store.prune_telemetry(NOW - 3600, NOW + 300) == 2
    assert [row.t_s for row in tmp_store.telemetry_latest()] == [NOW]


def test_trimming_keeps_the_newest_rows_of_one_device_only(tmp_store: RunStore) -> None:
    tmp_store.add_telemetry([TelemetryRow("pi-1", NOW + i) for i in range(50)])
    tmp_store.add_telemetry([TelemetryRow("pi-2", NOW + i) for i in range(5)])
    assert tmp_store.trim_telemetry("pi-1", keep=20) == 20
    devices = {d.device: d for d in tmp_store.telemetry_devices()}
    assert (devices["pi-1"].rows, devices["pi-1"].first_t_s, devices["pi-1"].last_t_s) == (
        20,
        NOW + 30,
        NOW + 49,
    )
    assert devices["pi-2"].rows == 5
    assert tmp_store.trim_telemetry("pi-2", keep=20) == 5
