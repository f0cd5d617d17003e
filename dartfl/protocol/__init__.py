"""The MQTT request plane's wire protocol, version 1 (docs/protocol.md): topics, requests,
replies, and what a device says about itself.

Pure (standard library + numpy): no MQTT client here, so the agent, the replayer, the
recorder, the dashboard and the tests share one codec per message, and every decoder can be
fuzzed without a broker. `dartfl.protocol.X` is the one import path.

A module whose public names are all part of that path lists them once, in its own `__all__`,
and this facade re-exports the list whole, so a new name is added in one place.
"""

from dartfl.protocol import answers, binary, device, profile_json, topics
from dartfl.protocol.answers import *  # noqa: F403
from dartfl.protocol.binary import *  # noqa: F403
from dartfl.protocol.device import *  # noqa: F403
from dartfl.protocol.jsonwire import RequestError
from dartfl.protocol.profile_json import *  # noqa: F403
from dartfl.protocol.replies import Reply, decode_reply, encode_error, encode_rejection, encode_reply
from dartfl.protocol.requests import (
    MessageProperties,
    Request,
    decode_json_request,
    encode_request,
)
from dartfl.protocol.topics import *  # noqa: F403

__all__ = [
    "MessageProperties",
    "Reply",
    "Request",
    "RequestError",
    "decode_json_request",
    "decode_reply",
    "encode_error",
    "encode_rejection",
    "encode_reply",
    "encode_request",
]
__all__ += answers.__all__
__all__ += binary.__all__
__all__ += device.__all__
__all__ += profile_json.__all__
__all__ += topics.__all__
