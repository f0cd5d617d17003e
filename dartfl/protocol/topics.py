"""What every message of the MQTT protocol shares (docs/protocol.md): the version, size limits,
QoS levels, error codes, and the topic layout with its naming rules, the reply rule included."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final, Literal

from dartfl.errors import ConfigError, ProtocolError

__all__ = [
    "ERROR_CODES",
    "IMAGE_BYTES",
    "IMAGE_DTYPE",
    "IMAGE_SHAPE",
    "MAX_DETAIL_CHARS",
    "MAX_ID_CHARS",
    "MAX_REPLY_TOPIC_BYTES",
    "MAX_REQUEST_BYTES",
    "PROTOCOL_VERSION",
    "REJECT_REASONS",
    "REPLY_QOS",
    "REPLY_ROOT",
    "REPLY_TOPIC_RULES",
    "REQUEST_QOS",
    "ROOT",
    "STATUS_QOS",
    "TELEMETRY_QOS",
    "RejectReason",
    "ReplyStatus",
    "ReplyTopicRule",
    "check_name",
    "check_requester",
    "parse_request_topic",
    "reply_topic",
    "reply_topic_problem",
    "request_subscription",
    "request_topic",
    "status_topic",
    "telemetry_topic",
]

PROTOCOL_VERSION: Final = 1
ROOT: Final = f"dartfl/v{PROTOCOL_VERSION}"
# Every reply goes under dartfl/v1/_reply/<requester>/: the shipped ACL lets only the
# requester's account read there, and a device write nowhere else (docs/protocol.md).
REPLY_ROOT: Final = f"{ROOT}/_reply"
IMAGE_SHAPE: Final = (28, 28)
IMAGE_BYTES: Final = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
IMAGE_DTYPE: Final = "uint8"
MAX_REQUEST_BYTES: Final = 16384
MAX_ID_CHARS: Final = 64
MAX_REPLY_TOPIC_BYTES: Final = 256
MAX_DETAIL_CHARS: Final = 256
REQUEST_QOS: Final = 1
REPLY_QOS: Final = 1
TELEMETRY_QOS: Final = 1
STATUS_QOS: Final = 1

ERROR_CODES: Final = frozenset(
    {
        "oversized-payload",
        "bad-json",
        "unsupported-version",
        "missing-field",
        "bad-field",
        "bad-shape",
        "bad-dtype",
        "bad-data",
        "unknown-task",
    }
)
RejectReason = Literal["queue-full", "shutting-down"]
REJECT_REASONS: Final = frozenset({"queue-full", "shutting-down"})
ReplyStatus = Literal["ok", "rejected", "error"]
# "requester": replies only under REPLY_ROOT (the default). "any": the first v1 rule (any topic
# that is not a device topic), for requesters not yet moved; see docs/protocol.md.
ReplyTopicRule = Literal["requester", "any"]
REPLY_TOPIC_RULES: Final = ("requester", "any")

# Device and task names become topic levels: keep them plain so no name can be a wildcard,
# start a `$` system topic, or collide with the `_reply` namespace.
NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE: Final = "1-64 characters from [A-Za-z0-9_.-], starting with a letter or digit"
DEVICE_TOPIC_RE: Final = re.compile(rf"{ROOT}/[^/]*/(req/[^/]*|telemetry|status)")
REPLY_TOPIC_RE: Final = re.compile(rf"{REPLY_ROOT}/{NAME_RE.pattern}(/.*)?", re.DOTALL)
# Device topic levels: a requester of such a name would have reply topics of a device topic's
# shape (dartfl/v1/_reply/status), which a reader of dartfl/v1/+/status also matches.
RESERVED_REQUESTER_NAMES: Final = frozenset({"req", "telemetry", "status"})


# --- topics ---------------------------------------------------------------------------------


def check_name(kind: str, name: str) -> str:
    """`name` if it may be a device, task or requester topic level, else ConfigError."""
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ConfigError(f"bad {kind} name {name!r}: expected {NAME_RULE}")
    return name


def request_topic(device: str, task: str) -> str:
    """Where requesters publish a request for `task` on `device`."""
    return f"{ROOT}/{check_name('device', device)}/req/{check_name('task', task)}"


def request_subscription(device: str) -> str:
    """The wildcard a device subscribes to for requests of all its tasks."""
    return f"{ROOT}/{check_name('device', device)}/req/+"


def telemetry_topic(device: str) -> str:
    return f"{ROOT}/{check_name('device', device)}/telemetry"


def status_topic(device: str) -> str:
    """Retained online/offline state; the device's last will goes here."""
    return f"{ROOT}/{check_name('device', device)}/status"


def check_requester(name: str) -> str:
    """`name` if it may name a requester (its reply namespace), else ConfigError."""
    check_name("requester", name)
    if name in RESERVED_REQUESTER_NAMES:
        raise ConfigError(
            f"requester name {name!r} is reserved (a level of the device topics: "
            f"{', '.join(sorted(RESERVED_REQUESTER_NAMES))}); pick another"
        )
    return name


def reply_topic(requester: str, *levels: str) -> str:
    """Where `requester` takes its replies: dartfl/v1/_reply/<requester>[/<level>...].

    Under the shipped ACL `requester` is the requester's account name, and a private level
    (a random one per run) keeps a run's replies apart from another run's of the same account."""
    check_requester(requester)
    return "/".join([REPLY_ROOT, requester, *(check_name("reply topic level", level) for level in levels)])


def parse_request_topic(topic: str) -> tuple[str, str]:
    """`dartfl/v1/<device>/req/<task>` -> (device, task); the task, even an empty one, is
    checked later by `decode_request` (unknown-task), so a subscriber can still answer it."""
    parts = topic.split("/") if isinstance(topic, str) else []
    if len(parts) != 5 or parts[0] != "dartfl" or parts[1] != f"v{PROTOCOL_VERSION}" or parts[3] != "req":
        raise ProtocolError("bad-topic", f"{topic!r} is not a request topic {ROOT}/<device>/req/<task>")
    if not parts[2]:
        raise ProtocolError("bad-topic", f"{topic!r} has an empty device level")
    return parts[2], parts[4]


def reply_topic_problem(value: object, rule: ReplyTopicRule = "requester") -> str | None:
    """Why `value` cannot be a reply topic under `rule`, or None if it can."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    return _text_reply_topic_problem(value, rule)


# A requester names the same reply topic on every request: a device checks it once, not for
# each of thousands a second. Bounded, so a client cycling through topics costs memory once.
@lru_cache(maxsize=1024)
def _text_reply_topic_problem(value: str, rule: ReplyTopicRule) -> str | None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if not 0 < size <= MAX_REPLY_TOPIC_BYTES:
        return f"must be 1-{MAX_REPLY_TOPIC_BYTES} UTF-8 bytes, got {size}"
    if "+" in value or "#" in value or "\x00" in value or value.startswith("$"):
        return "must not contain wildcards or NUL, nor start with '$'"
    # Replies must never land on a device's own topics (a reply published to a request
    # topic would come back to the device as a malformed request).
    if DEVICE_TOPIC_RE.fullmatch(value) is not None:
        return f"must not be a device topic ({ROOT}/<device>/req/<task>, /telemetry or /status)"
    # A device publishes its reply wherever this points: left open, any requester could make
    # devices publish onto any topic they may write (reply reflection).
    if rule == "requester":
        if REPLY_TOPIC_RE.fullmatch(value) is None:
            return f"must lie under {REPLY_ROOT}/<requester>/ (<requester>: {NAME_RULE})"
        requester = value[len(REPLY_ROOT) + 1 :].split("/", 1)[0]
        if requester in RESERVED_REQUESTER_NAMES:
            return (
                f"must not name a reserved requester ({', '.join(sorted(RESERVED_REQUESTER_NAMES))}): "
                f"got {requester!r}"
            )
    return None
