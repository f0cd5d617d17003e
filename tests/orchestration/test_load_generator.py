"""deploy-local's load generator against a real Mosquitto and an echo device: its replies come
back under the reply rule (dartfl/v1/_reply/<requester>/...), which a device now insists on."""

from __future__ import annotations

import time

import pytest

from dartfl import protocol
from messaging.brokers import start_mosquitto
from orchestration.load import LoadGenerator
from tests.messaging import mqtt_fixtures as fx

pytestmark = pytest.mark.integration


def test_the_load_generator_gets_its_replies_under_the_reply_rule() -> None:
    with start_mosquitto() as broker:
        device = fx.EchoDevice(broker.url, "dl-1", ("digits",))
        load = LoadGenerator(broker.url, ["dl-1"], ("digits",), rate_per_s=50.0)
        try:
            assert protocol.reply_topic_problem(load.reply_to) is None
            load.start()
            time.sleep(1.0)
        finally:
            counts = load.stop()["dl-1"]
            device.close()
    assert counts["sent"] > 0 and counts["replies"] == counts["sent"] == counts["ok"]
