from __future__ import annotations

from typing import Any

import pytest

from memory_bridge.core.messages import (
    Message,
    MessageError,
    conversation,
    latest_user_text,
    parse_messages,
)


def test_parts_and_unknown_fields_survive_a_round_trip() -> None:
    raw = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
        ],
        "vendor_flag": {"x": 1},
    }
    [msg] = parse_messages([raw])
    assert msg.to_dict() == raw
    assert msg.text() == "look"


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (None, "non-empty array"),
        ([], "non-empty array"),
        ("hi", "non-empty array"),
        (["hi"], "messages[0] must be an object"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"content": "x"}], "messages[0].role"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": {"text": "x"}}], "messages[0].content"),
        ([{"role": "user", "content": [{"text": "no type"}]}], "messages[0].content"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": "a"}, {"role": "assistant"}], "messages[1].content"),
        ([{"role": "user", "content": "a", "name": 3}], "messages[0].name"),
    ],
)
def test_invalid_messages_name_the_problem(messages: Any, needle: str) -> None:
    with pytest.raises(MessageError, match=None) as info:
        parse_messages(messages)
    assert needle in str(info.value)


def test_assistant_may_carry_only_tool_calls_or_a_legacy_function_call() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    parse_messages([{"role": "assistant", "content": None, "tool_calls": calls}])
    parse_messages([{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}])


def test_the_query_is_the_latest_user_text_not_a_tool_result() -> None:
    msgs = parse_messages(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "first"},
            {"role": "user", "content": [{"type": "text", "text": "  where is Ada?  "}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
            {"role": "tool", "content": "result text", "tool_call_id": "c"},
        ]
    )
    assert latest_user_text(msgs) == "where is Ada?"
    assert [m.role for m in conversation(msgs)] == ["user", "user", "assistant", "tool"]
    assert latest_user_text(parse_messages([{"role": "system", "content": "s"}])) == ""


def test_identity_ignores_what_sdks_reformat() -> None:
    stored = Message(
        role="assistant",
        content=None,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    )
    resent = Message(
        role="assistant",
        content="",
        tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": "{}"}, "index": 0}],
    )
    assert stored.identity() == resent.identity()
    assert (
        Message(role="user", content="ok").identity()
        != Message(role="assistant", content="ok").identity()
    )
    assert (
        Message(role="user", content="ok").identity()
        != Message(role="user", content="ok.").identity()
    )
