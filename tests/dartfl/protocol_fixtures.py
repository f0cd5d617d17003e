"""What the request plane's protocol tests share: the tasks a device serves, reply topics (one
from an MQTT 5 requester), a valid image, and helpers that build request objects and catch the
decoder's error."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from dartfl import protocol as p

TASKS = frozenset({"mnist", "fashion", "digits"})
REPLY = "dartfl/v1/_reply/tester"
MQTT5_REPLY = "dartfl/v1/_reply/mqtt5-tester/7f3a"
IMAGE = np.arange(784, dtype=np.uint8).reshape(28, 28)


def valid_obj(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(p.encode_request("r-1", IMAGE, REPLY, sent_at=12.5))
    obj.update(changes)
    return obj


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def error_of(payload: bytes, task: str = "mnist", **kwargs: Any) -> p.RequestError:
    with pytest.raises(p.RequestError) as info:
        p.decode_request(payload, task, TASKS, **kwargs)
    return info.value
