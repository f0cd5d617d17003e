"""The values that cross the paho edge: a received `Message` (MQTT 5 properties included),
the MQTT 5 properties of a publish, and the last `Will` a client leaves with the broker."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

__all__ = ["Message", "Will", "message_from_paho", "publish_properties"]


@dataclass(frozen=True)
class Message:
    """One received message. The MQTT 5 properties are None under 3.1.1 or when absent."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    response_topic: str | None = None
    correlation_data: bytes | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class Will:
    """The last will the broker publishes if the link dies without a clean close."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


def message_from_paho(msg: paho.MQTTMessage) -> Message:
    props = getattr(msg, "properties", None)
    response_topic = getattr(props, "ResponseTopic", None) if props is not None else None
    correlation = getattr(props, "CorrelationData", None) if props is not None else None
    content_type = getattr(props, "ContentType", None) if props is not None else None
    return Message(
        topic=msg.topic,
        payload=bytes(msg.payload),
        qos=msg.qos,
        retain=bool(msg.retain),
        response_topic=response_topic if isinstance(response_topic, str) else None,
        correlation_data=bytes(correlation) if isinstance(correlation, bytes | bytearray) else None,
        content_type=content_type if isinstance(content_type, str) else None,
    )


def publish_properties(
    response_topic: str | None, correlation_data: bytes | None, content_type: str | None
) -> Properties | None:
    """The MQTT 5 properties of a publish; None when it sets none. Treat them as read-only:
    a content type alone (every batch of replies) gets one shared object."""
    if response_topic is None and correlation_data is None:
        return None if content_type is None else _content_type_only(content_type)
    props = Properties(PacketTypes.PUBLISH)
    if response_topic is not None:
        props.ResponseTopic = response_topic
    if correlation_data is not None:
        props.CorrelationData = correlation_data
    if content_type is not None:
        props.ContentType = content_type
    return props


# paho builds a Properties object by filling some thirty tables (about as much as the rest
# of a publish); paho only packs the ones it is given, so one per content type serves all.
@lru_cache(maxsize=16)
def _content_type_only(content_type: str) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = content_type
    return props
