"""The request plane's topics: the v1 layout, names that are not plain topic levels, parsing
request topics, and the reply rule (replies go to dartfl/v1/_reply/<requester>/... only)."""

from __future__ import annotations

import pytest

from dartfl import protocol as p
from dartfl.errors import ConfigError, InputError, ProtocolError
from tests.dartfl.protocol_fixtures import IMAGE, REPLY, TASKS, error_of, raw, valid_obj

# --- topics ---------------------------------------------------------------------------------


def test_topics_follow_the_v1_layout() -> None:
    assert p.request_topic("pi-01", "mnist") == "dartfl/v1/pi-01/req/mnist"
    assert p.request_subscription("pi-01") == "dartfl/v1/pi-01/req/+"
    assert p.telemetry_topic("pi-01") == "dartfl/v1/pi-01/telemetry"
    assert p.status_topic("pi-01") == "dartfl/v1/pi-01/status"
    assert p.reply_topic("replayer") == "dartfl/v1/_reply/replayer"
    assert p.reply_topic("replayer", "3f9a") == "dartfl/v1/_reply/replayer/3f9a"
    assert p.parse_request_topic(p.request_topic("pi-01", "mnist")) == ("pi-01", "mnist")


@pytest.mark.parametrize("name", ["", "a/b", "+", "#", "_x", "$SYS", "x" * 65, "naïve"])
def test_topic_helpers_reject_names_that_are_not_plain_topic_levels(name: str) -> None:
    with pytest.raises(ConfigError, match="A-Za-z0-9"):
        p.request_topic(name, "mnist")
    with pytest.raises(ConfigError):
        p.request_topic("pi", name)


@pytest.mark.parametrize(
    "topic", ["dartfl/v1/pi/req", "dartfl/v2/pi/req/mnist", "dartfl/v1/pi/reqs/mnist", "dartfl/v1//req/x", ""]
)
def test_parse_request_topic_rejects_other_topics(topic: str) -> None:
    with pytest.raises(ProtocolError) as info:
        p.parse_request_topic(topic)
    assert info.value.code == "bad-topic"


def test_parse_request_topic_leaves_task_checking_to_the_decoder() -> None:
    assert p.parse_request_topic("dartfl/v1/pi/req/no such task") == ("pi", "no such task")
    # `req/` matches the agent's `req/+`: the requester gets an unknown-task reply, not silence.
    assert p.parse_request_topic("dartfl/v1/pi/req/") == ("pi", "")


# --- the reply rule: replies go to dartfl/v1/_reply/<requester>/... only ----------------------

# Topics the first v1 rule let a requester choose (not device topics), and so had any device
# publish to for whoever asked: reply reflection.
REFLECTED = ["alerts/door", "dartfl/v1/replay/3f9a/reply", "dartfl/v2/pi/req/mnist", "dartfl/v1/_reply"]


@pytest.mark.parametrize("topic", REFLECTED)
def test_a_reply_topic_outside_the_reply_namespace_is_refused_and_not_answered(topic: str) -> None:
    err = error_of(raw(valid_obj(reply_to=topic)))
    assert err.code == "bad-field" and "dartfl/v1/_reply/<requester>/" in err.detail
    assert err.reply_to is None  # no error reply goes there either
    err = error_of(b"garbage", response_topic=topic, correlation_data=b"c-1")
    assert (err.code, err.reply_to) == ("bad-json", None)


@pytest.mark.parametrize("topic", REFLECTED)
def test_the_any_rule_keeps_the_first_v1_reply_topics_for_a_transition(topic: str) -> None:
    request = p.decode_request(raw(valid_obj(reply_to=topic)), "mnist", TASKS, reply_rule="any")
    assert request.reply_to == topic


@pytest.mark.parametrize("rule", p.REPLY_TOPIC_RULES)
def test_device_topics_stay_refused_as_reply_topics_under_either_rule(rule: p.ReplyTopicRule) -> None:
    for topic in ("dartfl/v1/pi/req/mnist", "dartfl/v1/pi/status", "dartfl/v1/_reply/telemetry"):
        assert p.reply_topic_problem(topic, rule) is not None, topic


def test_reply_topics_under_a_requester_name_are_valid() -> None:
    for topic in (REPLY, p.reply_topic("replayer", "3f9a"), "dartfl/v1/_reply/app-1/a/b"):
        assert p.reply_topic_problem(topic) is None, topic
    assert p.reply_topic_problem("dartfl/v1/_reply/_x/a") is not None  # not a name


@pytest.mark.parametrize("name", ["req", "telemetry", "status"])
def test_requester_names_that_are_device_topic_levels_are_reserved(name: str) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        p.reply_topic(name, "x")


def test_encode_request_keeps_to_the_reply_rule() -> None:
    with pytest.raises(InputError, match="_reply"):
        p.encode_request("r", IMAGE, "alerts/door")


@pytest.mark.parametrize("topic", ["dartfl/v1/_reply/req", "dartfl/v1/_reply/req/a/b"])
def test_a_reply_topic_under_a_reserved_requester_name_is_refused(topic: str) -> None:
    # `reply_topic()` refused to build it, but the rule a device checks requests by let it
    # through: a device replied on dartfl/v1/_reply/req. (status and telemetry were refused
    # only because they look like a device's own topics.)
    assert "reserved requester" in (p.reply_topic_problem(topic) or "")
