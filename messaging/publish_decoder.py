"""Decoding an MQTT 5 PUBLISH packet in a few microseconds instead of paho's ~37.

paho builds a fresh `Properties` object for every message it receives (a 27-name table, then
a linear scan over it per property, and a `__setattr__` that validates each name against the
table again): 37 us of the 150 us a request may cost on this project's machine, the largest
single item on the agent's network thread (benchmarks/request_path.py; docs/benchmarks.md,
"The request path").

`decode_publish` reads the PUBLISH that request traffic is made of (QoS 0 or 1, a property
list under 128 bytes with the single-valued properties a request or reply carries, ASCII
strings) and fills a paho `Properties` whose tables are shared instead of rebuilt. Anything
else (a user property, a subscription identifier, a repeated or unknown property, non-ASCII
text, a truncated packet) returns None, and the caller lets paho decode the packet, so every
other packet, and every malformed one, is treated exactly as paho treats it.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

__all__ = ["FastPublish", "decode_publish"]

_U16: Final = struct.Struct("!H")
_U32: Final = struct.Struct("!L")

# The tables paho's Properties builds in its constructor, built once: they are only read.
_TEMPLATE: Final = Properties(PacketTypes.PUBLISH)
_SHARED_TABLES: Final = {name: getattr(_TEMPLATE, name) for name in ("types", "names", "properties")}

# PUBLISH properties handled here (MQTT 5.0, 3.3.2.3): identifier -> (paho's attribute, kind).
_STRING, _BINARY, _BYTE, _TWO, _FOUR = range(5)
_HANDLED: Final = {
    1: ("PayloadFormatIndicator", _BYTE),
    2: ("MessageExpiryInterval", _FOUR),
    3: ("ContentType", _STRING),
    8: ("ResponseTopic", _STRING),
    9: ("CorrelationData", _BINARY),
    35: ("TopicAlias", _TWO),
}


class FastPublish(NamedTuple):  # a tuple: one per message, built at half a frozen dataclass's cost
    topic: bytes
    mid: int
    properties: Properties
    payload: bytes


def _blank_properties() -> Properties:
    props: Properties = object.__new__(Properties)
    object.__setattr__(props, "packetType", PacketTypes.PUBLISH)
    for name, table in _SHARED_TABLES.items():
        object.__setattr__(props, name, table)
    return props


def decode_publish(header: int, packet: bytes | bytearray) -> FastPublish | None:
    """The PUBLISH whose fixed header's first byte is `header` and whose remainder is
    `packet`, under MQTT 5; None when paho should decode it (see the module docstring)."""
    qos = (header >> 1) & 0x03
    if qos > 1:
        return None
    size = len(packet)
    if size < 2:
        return None
    (topic_len,) = _U16.unpack_from(packet)
    at = 2 + topic_len
    topic = packet[2:at]
    mid = 0
    if qos:
        if size < at + 2:
            return None
        (mid,) = _U16.unpack_from(packet, at)
        at += 2
    if size <= at:
        return None
    props_len = packet[at]
    if props_len & 0x80:  # a property list of 128 bytes or more: paho's
        return None
    at += 1
    end = at + props_len
    if end > size:
        return None
    props = _blank_properties()
    seen: set[int] = set()
    while at < end:
        ident = packet[at]
        at += 1
        if ident not in _HANDLED or ident in seen:
            return None
        seen.add(ident)
        name, kind = _HANDLED[ident]
        value: object
        if kind == _BYTE:
            if at + 1 > end or packet[at] > 1:
                return None
            value, at = packet[at], at + 1
        elif kind == _TWO:
            if at + 2 > end:
                return None
            (value,) = _U16.unpack_from(packet, at)
            at += 2
            if value == 0:
                return None
        elif kind == _FOUR:
            if at + 4 > end:
                return None
            (value,) = _U32.unpack_from(packet, at)
            at += 4
        else:
            if at + 2 > end:
                return None
            (length,) = _U16.unpack_from(packet, at)
            at += 2
            if at + length > end:
                return None
            raw = packet[at : at + length]
            at += length
            if kind == _BINARY:
                value = bytes(raw)
            elif raw.isascii() and b"\x00" not in raw:
                value = raw.decode("ascii")
            else:  # paho checks non-ASCII text for code points MQTT forbids
                return None
        object.__setattr__(props, name, value)
    return FastPublish(topic=bytes(topic), mid=mid, properties=props, payload=bytes(packet[end:]))
