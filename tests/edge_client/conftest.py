"""Fixtures of the edge client's tests: a throwaway Mosquitto broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from messaging.brokers import BrokerHandle
from tests.messaging import mqtt_fixtures as fx


@pytest.fixture
def broker() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()
