"""When a requester takes a device agent as alive (orchestration.agent_watch): its online
status, or its live telemetry whatever the retained status says, so that a stale or spoofed
retained `offline` cannot keep `edge replay` from a healthy agent."""

from __future__ import annotations

import time

import pytest

from dartfl import protocol
from dartfl.errors import DartflError
from dartfl.profiles import get_profile
from dartfl.protocol import DeviceStatus
from dashboard import synthetic
from messaging.brokers import start_mosquitto
from messaging.link import Message, connect
from orchestration.agent_watch import AgentWatch, wait_for_agent

DEVICE = "pi-9"
STATUS, TELEMETRY = protocol.status_topic(DEVICE), protocol.telemetry_topic(DEVICE)


def _status(online: bool, t: float | None = None, *, retain: bool = True) -> Message:
    payload = protocol.encode_status(DeviceStatus(DEVICE, online, t, get_profile("pi5") if online else None))
    return Message(STATUS, payload, 1, retain)


def _telemetry(*, retain: bool = False) -> Message:
    snapshot = synthetic.snapshot(DEVICE, time.time(), 3)
    return Message(TELEMETRY, protocol.encode_telemetry(snapshot), 1, retain)


def test_an_online_status_is_alive_and_gives_its_profile() -> None:
    watch = AgentWatch(DEVICE)
    watch.handle(_status(True, time.time()))
    sighting = watch.sighting()
    assert sighting is not None and sighting.profile is not None and sighting.profile.name == "pi5"


def test_live_telemetry_is_alive_whatever_the_retained_status_says() -> None:
    # A spoofed offline dated far in the future: comparing clocks would hide the device for good.
    watch = AgentWatch(DEVICE)
    watch.handle(_status(False, t=9.9e9))
    assert watch.sighting() is None and not watch.alive.is_set()
    watch.handle(_telemetry())
    sighting = watch.sighting()
    assert sighting is not None and sighting.telemetry is not None
    assert sighting.status is not None and not sighting.status.online  # and it says so


def test_retained_telemetry_or_a_bad_message_is_no_sign_of_life() -> None:
    watch = AgentWatch(DEVICE)
    watch.handle(_telemetry(retain=True))  # telemetry is never retained: someone planted it
    watch.handle(Message(STATUS, b"not json", 1, True))
    assert watch.sighting() is None
    assert "no online status on dartfl/v1/pi-9/status and no telemetry" in watch.silence("mqtt://x", 5, None)


@pytest.mark.integration
def test_wait_for_agent_sees_a_healthy_agent_behind_a_spoofed_retained_offline() -> None:
    with start_mosquitto() as broker:  # no ACL: anyone may write the status
        spoofer = connect(broker.url, "spoofer", on_message=lambda m: None)
        spoofer.publish(STATUS, _status(False, t=9.9e9).payload, retain=True)
        assert spoofer.flush()
        spoofer.close()
        with pytest.raises(DartflError, match="retained status says offline"):
            wait_for_agent(broker.url, DEVICE, timeout_s=1)
        device = connect(broker.url, "device", on_message=lambda m: None)
        stop = time.monotonic() + 30
        try:
            # The agent publishes telemetry every period; a check() hook keeps this one going.
            def publish() -> None:
                device.publish(TELEMETRY, _telemetry().payload)
                assert time.monotonic() < stop

            publish()
            sighting = wait_for_agent(broker.url, DEVICE, timeout_s=20, check=publish)
        finally:
            device.close()
    assert sighting.telemetry is not None and sighting.telemetry.device == DEVICE
