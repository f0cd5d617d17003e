"""paho's client without the three habits that cost most on a busy link.

At a few thousand messages a second paho's network thread, not the broker, is what limits a
device (benchmarks/request_path.py; docs/benchmarks.md, "The request path"). `LeanClient`
changes what paho does per packet and nothing it does per connection:

- **Reads** come from a buffer (messaging.buffered_socket): one `recv` for a burst instead of
  three or four per packet, and every whole packet in the buffer handled in one wake-up.
- **PUBLISH decoding** of the packets requests and replies are made of takes a few
  microseconds instead of ~37 (messaging.publish_decoder); paho decodes every other packet.
- **Writes** go out together: the acknowledgements a burst of QoS 1 messages calls for, and
  the replies queued meanwhile, leave in one `send` instead of one each (each a trip through
  the kernel's TCP stack, which on loopback also delivers it).
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode

from messaging.buffered_socket import BufferedSocket
from messaging.publish_decoder import decode_publish

if TYPE_CHECKING:
    from paho.mqtt.client import _OutPacket

__all__ = ["WRITE_BYTES", "LeanClient"]

# Queued packets joined into one send, up to this many bytes; a larger packet goes alone.
WRITE_BYTES: Final = 65536

_PUBLISH: Final = 0x30
_DISCONNECT: Final = 0xE0


def _joinable(packet: _OutPacket) -> bool:
    """Whether paho does nothing once `packet` is written but count it: not a QoS 0 PUBLISH
    (its on_publish fires then) nor a DISCONNECT (the socket closes then)."""
    kind = packet["command"] & 0xF0
    return not ((kind == _PUBLISH and packet["qos"] == 0) or kind == _DISCONNECT)


def join_queued(out: deque[_OutPacket], limit: int = WRITE_BYTES) -> None:
    """Replace the run of joinable packets at the head of paho's outgoing queue (its unsent
    bytes, in order) by one packet that carries them all. Under `loop_start`, as every link
    runs, only the network thread takes from the left of the queue and other threads only
    append to its right. (Without it paho writes from whichever thread publishes, and two
    writers race over the queue's head, joined or not.)"""
    taken: list[_OutPacket] = []
    size = 0
    while out and _joinable(out[0]) and size + out[0]["to_process"] <= limit:
        packet = out.popleft()
        taken.append(packet)
        size += packet["to_process"]
    if len(taken) < 2:
        out.extendleft(reversed(taken))
        return
    head = taken[0]
    out.appendleft(
        {
            "command": head["command"],
            "mid": head["mid"],
            "qos": head["qos"],
            "pos": 0,
            "to_process": size,
            "packet": b"".join(p["packet"][p["pos"] :] for p in taken),
            "info": head["info"],
        }
    )


class LeanClient(paho.Client):
    """A paho client with buffered reads, a quick PUBLISH decoder and joined writes."""

    def _create_socket(self) -> Any:
        return BufferedSocket(super()._create_socket())

    def loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        rc = super().loop_read(max_packets)
        # paho reads one packet per wake-up of its loop; go on while the buffer holds more,
        # so their acknowledgements go out together after them (paho writes after reading).
        while (
            rc == paho.MQTT_ERR_SUCCESS and isinstance(self._sock, BufferedSocket) and self._sock.buffered()
        ):
            rc = super().loop_read(max_packets)
        return rc

    def _handle_publish(self) -> MQTTErrorCode:
        header = self._in_packet["command"]
        decoded = decode_publish(header, self._in_packet["packet"]) if self._protocol == paho.MQTTv5 else None
        if decoded is None:
            return super()._handle_publish()
        # What paho's own handler does for QoS 0 and 1, less its "Received PUBLISH" debug
        # line (for on_log, which links drop once connected, or a logger from
        # enable_logger, which no link calls).
        message = paho.MQTTMessage(mid=decoded.mid, topic=decoded.topic)
        message.dup = bool(header & 0x08)
        message.qos = (header >> 1) & 0x03
        message.retain = bool(header & 0x01)
        message.properties = decoded.properties
        message.payload = decoded.payload
        message.timestamp = time.monotonic()
        self._handle_on_message(message)
        if message.qos == 1 and not self._manual_ack:
            return self._send_puback(message.mid)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _packet_write(self) -> MQTTErrorCode:
        join_queued(self._out_packet)
        return super()._packet_write()
