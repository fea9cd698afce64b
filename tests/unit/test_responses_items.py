"""Responses API items ⇄ the stored message model: the mapping, its validation, and that a
resent conversation converts to exactly what was stored for it."""

from __future__ import annotations

from typing import Any

import pytest

from memory_bridge.core.message_bounds import bounded
from memory_bridge.core.messages import Message, MessageError
from memory_bridge.core.responses_items import history_items, input_messages, output_run
from memory_bridge.core.turn import Reply

Item = dict[str, Any]


def dumps(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_none=True) for m in messages]


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city":"Oslo"}') -> Item:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output_message(text: str, **extra: Any) -> Item:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "role": "assistant", "content": [part], "id": "msg_1", **extra}


def test_a_string_input_is_one_user_message() -> None:
    assert dumps(input_messages("Hello")) == [{"role": "user", "content": "Hello"}]
    assert input_messages(None) == ()


def test_messages_in_every_form() -> None:
    items: list[Any] = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]},
        {"role": "user", "content": "plain"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"},
                {"type": "input_image", "file_id": "file-img"},
                {"type": "input_file", "file_id": "file-pdf", "filename": "a.pdf"},
                {"type": "input_file", "file_url": "https://x/b.pdf"},
                {"type": "input_video", "video": "?"},
            ],
        },
    ]
    assert dumps(input_messages(items)) == [
        {"role": "developer", "content": "Be brief."},
        {"role": "system", "content": [{"type": "text", "text": "S"}]},
        {"role": "user", "content": "plain"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
                {"type": "text", "text": "[input_image 'file-img', not stored by MemoryBridge]"},
                {"type": "file", "file": {"file_id": "file-pdf", "filename": "a.pdf"}},
                {
                    "type": "text",
                    "text": "[input_file 'https://x/b.pdf', not stored by MemoryBridge]",
                },
                {"type": "text", "text": "[input_video, not stored by MemoryBridge]"},
            ],
        },
    ]


def test_assistant_items_in_a_row_are_one_message_and_tool_outputs_answer_them() -> None:
    items: list[Any] = [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        output_message("Checking."),
        call("call_a"),
        call("call_b", arguments='{"city":"Bergen"}'),
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": [{"type": "input_text", "text": "rain"}, {"type": "input_image"}],
        },
        {"type": "item_reference", "id": "msg_old"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"role": "assistant", "content": "Oslo sunny, Bergen rain."},
    ]
    weather = {"name": "get_weather", "arguments": '{"city":"Oslo"}'}
    assert dumps(input_messages(items)) == [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": weather},
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {**weather, "arguments": '{"city":"Bergen"}'},
                },
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_a"},
        {
            "role": "tool",
            "content": "rain\n[input_image, not stored by MemoryBridge]",
            "tool_call_id": "call_b",
        },
        {"role": "assistant", "content": "Oslo sunny, Bergen rain."},
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (42, "'input' must be a string or an array of items"),
        ([["user", "hi"]], "input[0] must be an object"),
        ([{"role": "tool", "content": "x"}], "input[0].role: must be one of"),
        ([{"content": "no role"}], "input[0].role"),
        ([{"role": "user", "content": 7}], "input[0].content: must be a string or an array"),
        ([{"role": "user"}], "input[0].content"),
        ([{"role": "user", "content": [{"text": "x"}]}], "input[0].content[0]: must be an"),
        ([{"role": "user", "content": [{"type": "input_text"}]}], "content[0].text: must be"),
        ([{"role": "assistant", "content": [{"type": "output_text", "text": 1}]}], ".text"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
        ([{"type": "function_call", "call_id": "c", "name": "f"}], "input[0].arguments"),
        ([{"type": "function_call_output", "output": "x"}], "input[0].call_id"),
        ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output"),
        ([{"type": 5}], "input[0].type: must be a string"),
    ],
)
def test_what_the_proxy_must_read_is_validated(raw: object, message: str) -> None:
    with pytest.raises(MessageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        input_messages(raw)


def test_history_renders_back_as_items() -> None:
    messages = (
        Message(role="user", content="hi"),
        Message.model_validate(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x/a.png", "detail": "high"},
                    },
                    {"type": "file", "file": {"file_id": "file-1"}},
                ],
            }
        ),
        Message.model_validate(
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ),
        Message(role="tool", content="done", tool_call_id="c1"),
        Message(role="assistant", content=None, tool_calls=[]),  # nothing to render
    )
    assert history_items(messages) == [
        {"type": "message", "role": "user", "content": "hi"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": "https://x/a.png", "detail": "high"},
                {"type": "input_file", "file_id": "file-1"},
            ],
        },
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    # ... and read back, they are the messages they came from.
    assert input_messages(history_items(messages[:4])) == messages[:4]


def test_a_reply_captured_from_output_is_what_its_resend_converts_to() -> None:
    """The stored reply and the same items resent by a stateless client have one identity, so
    the history matcher does not inject or store them twice."""
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        output_message("Two calls."),
        {**call("call_1"), "id": "fc_1", "status": "completed"},
        {**call("call_2"), "id": "fc_2", "status": "completed"},
    ]
    run = output_run(output)
    reply = Reply(content=run.content, tool_calls=tuple(run.calls), finish_reason="tool_calls")
    resent = input_messages([{"role": "user", "content": "go"}, *output])
    assert bounded(resent[1], 1000).identity() == bounded(reply.as_message(), 1000).identity()


def test_output_run_skips_what_it_cannot_read() -> None:
    run = output_run(
        [
            "junk",
            {"type": "message", "role": "assistant", "content": 5},
            {"type": "function_call", "call_id": "c", "name": None, "arguments": "{}"},
            {"type": "message", "role": "assistant", "content": [{"type": "refusal"}]},
            output_message("kept"),
        ]
    )
    assert (run.content, run.calls) == ("kept", [])
    assert not output_run([])
