"""StreamCapture and reply_from_json: what an upstream answered, never including reasoning."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_bridge.chat.capture import StreamCapture, reply_from_json
from memory_bridge.core.turn import Reply

DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    index: int = 0,
    **extra: Any,
) -> bytes:
    choice = {"index": index, "delta": delta or {}, "finish_reason": finish_reason}
    return sse(
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice], **extra}
    )


def usage_chunk(usage: dict[str, Any]) -> bytes:
    return sse(
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    )


def call_frag(index: int | None = None, **fields: Any) -> dict[str, Any]:
    frag: dict[str, Any] = dict(fields)
    if index is not None:
        frag["index"] = index
    return frag


def capture(*chunks: bytes, end: bytes = DONE) -> tuple[StreamCapture, Reply | None]:
    """Feed the reads, then `end` (by default `[DONE]`, so the stream counts as complete)."""
    cap = StreamCapture()
    for c in (*chunks, end):
        cap.feed(c)
    return cap, cap.finish()


# --- content and finish_reason ---------------------------------------------------------------


def test_content_pieces_are_concatenated() -> None:
    cap, reply = capture(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo, "}),
        chunk({"content": "wörld 🎉"}),
        chunk({}, finish_reason="stop"),
        DONE,
    )
    assert reply == Reply(content="Hello, wörld 🎉", finish_reason="stop")
    assert cap.done
    assert not cap.errored


def test_finish_reason_is_the_last_non_null_one() -> None:
    _, reply = capture(
        chunk({"content": "a"}, finish_reason="length"),
        chunk({"content": "b"}, finish_reason=None),
        chunk({}, finish_reason="stop"),
        chunk({}),
    )
    assert reply is not None
    assert reply.finish_reason == "stop"


def test_reasoning_is_never_captured() -> None:
    _, reply = capture(
        chunk({"role": "assistant", "reasoning_content": "secret plan"}),
        chunk({"reasoning": "more thoughts"}),
        chunk({"reasoning_content": " still thinking", "content": "Answer"}),
        chunk({"content": "."}, finish_reason="stop"),
        DONE,
    )
    assert reply == Reply(content="Answer.", finish_reason="stop")


def test_reasoning_only_stream_is_nothing_usable() -> None:
    cap, reply = capture(
        chunk({"reasoning_content": "thinking"}), chunk({}, finish_reason="stop"), DONE
    )
    assert reply is None
    assert cap.done


def test_non_string_content_is_ignored() -> None:
    _, reply = capture(chunk({"content": None}), chunk({"content": 5}), chunk({"content": "ok"}))
    assert reply == Reply(content="ok")


def test_only_choice_zero_is_captured() -> None:
    _, reply = capture(
        chunk({"content": "zero"}, index=0),
        chunk({"content": "one", "tool_calls": [call_frag(0, id="x")]}, index=1),
        chunk({}, finish_reason="length", index=1),
        chunk({}, finish_reason="stop", index=0),
        DONE,
    )
    assert reply == Reply(content="zero", finish_reason="stop")


def test_choices_in_one_chunk_are_filtered_by_index() -> None:
    both = sse(
        {
            "choices": [
                {"index": 1, "delta": {"content": "B"}, "finish_reason": None},
                {"index": 0, "delta": {"content": "A"}, "finish_reason": None},
                "junk",
            ]
        }
    )
    _, reply = capture(both)
    assert reply == Reply(content="A")


def test_choice_without_index_counts_as_choice_zero() -> None:
    _, reply = capture(sse({"choices": [{"delta": {"content": "hi"}}]}))
    assert reply == Reply(content="hi")


# --- usage -----------------------------------------------------------------------------------


def test_usage_only_final_chunk_sets_usage() -> None:
    _, reply = capture(
        chunk({"content": "hi"}, usage=None),
        chunk({}, finish_reason="stop", usage=None),
        usage_chunk(USAGE),
        DONE,
    )
    assert reply == Reply(content="hi", finish_reason="stop")
    # Reply.usage is excluded from ==, so check it on its own.
    assert reply is not None
    assert reply.usage == USAGE


def test_null_usage_after_usage_does_not_erase_it() -> None:
    _, reply = capture(chunk({"content": "hi"}), usage_chunk(USAGE), chunk({}, usage=None))
    assert reply is not None
    assert reply.usage == USAGE


def test_no_usage_means_none() -> None:
    _, reply = capture(chunk({"content": "hi"}), DONE)
    assert reply is not None
    assert reply.usage is None


# --- tool calls ------------------------------------------------------------------------------


def test_tool_call_fragments_are_merged_by_index() -> None:
    _, reply = capture(
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    call_frag(
                        0, id="call_a", type="function", function={"name": "get", "arguments": ""}
                    )
                ]
            }
        ),
        chunk({"tool_calls": [call_frag(0, function={"arguments": '{"ci'})]}),
        chunk(
            {
                "tool_calls": [
                    call_frag(1, id="call_b", type="function", function={"name": "put"}),
                    call_frag(0, function={"arguments": 'ty": "Paris"}'}),
                ]
            }
        ),
        chunk({"tool_calls": [call_frag(1, function={"arguments": "{}"})]}),
        chunk({}, finish_reason="tool_calls"),
        DONE,
    )
    assert reply == Reply(
        content=None,
        tool_calls=(
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get", "arguments": '{"city": "Paris"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}},
        ),
        finish_reason="tool_calls",
    )


def test_tool_calls_are_ordered_by_index_not_arrival() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(2, id="c2", function={"name": "two"})]}),
        chunk({"tool_calls": [call_frag(0, id="c0", function={"name": "zero"})]}),
    )
    assert reply is not None
    assert [c["id"] for c in reply.tool_calls] == ["c0", "c2"]


def test_tool_call_defaults_when_fields_are_missing() -> None:
    _, reply = capture(chunk({"tool_calls": [call_frag(0, function={"arguments": "{}"})]}))
    assert reply is not None
    assert reply.tool_calls == (
        {"id": "", "type": "function", "function": {"name": "", "arguments": "{}"}},
    )


def test_split_tool_name_fragments_concatenate() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(0, id="c", function={"name": "get_"})]}),
        chunk({"tool_calls": [call_frag(0, function={"name": "weather", "arguments": "{}"})]}),
    )
    assert reply is not None
    assert reply.tool_calls[0]["function"] == {"name": "get_weather", "arguments": "{}"}


def test_name_and_id_resent_in_every_fragment_are_not_doubled() -> None:
    frags = [
        call_frag(0, id="c", type="function", function={"name": "read_file", "arguments": a})
        for a in ['{"pa', 'th": ', '"x"}']
    ]
    _, reply = capture(*(chunk({"tool_calls": [f]}) for f in frags))
    assert reply is not None
    assert reply.tool_calls == (
        {
            "id": "c",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "x"}'},
        },
    )


def test_first_id_and_type_of_a_call_are_kept() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(0, id="call_a", type="function")]}),
        chunk({"tool_calls": [call_frag(0, id="call_z", type="other", function={"name": "f"})]}),
    )
    assert reply is not None
    assert reply.tool_calls[0]["id"] == "call_a"
    assert reply.tool_calls[0]["type"] == "function"


def test_arguments_sent_as_an_object_become_a_json_string() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(0, id="c", function={"name": "f", "arguments": {"é": 1}})]})
    )
    assert reply is not None
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == {"é": 1}


def test_tool_calls_without_index_are_told_apart_by_id() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(id="a", function={"name": "f", "arguments": "{"})]}),
        chunk({"tool_calls": [call_frag(function={"arguments": "}"})]}),
        chunk({"tool_calls": [call_frag(id="b", function={"name": "g", "arguments": "[]"})]}),
        chunk({"tool_calls": [call_frag(id="b", function={"arguments": ""})]}),
    )
    assert reply is not None
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls
    ] == [
        ("a", "f", "{}"),
        ("b", "g", "[]"),
    ]


def test_index_less_fragment_with_a_known_id_returns_to_its_call() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(id="a", function={"name": "f", "arguments": "["})]}),
        chunk({"tool_calls": [call_frag(id="b", function={"name": "g", "arguments": "{"})]}),
        chunk({"tool_calls": [call_frag(id="a", function={"arguments": "]"})]}),
        chunk({"tool_calls": [call_frag(function={"arguments": "}"})]}),
    )
    assert reply is not None
    assert [c["function"]["arguments"] for c in reply.tool_calls] == ["[]", "{}"]


def test_malformed_tool_call_fragments_are_skipped() -> None:
    _, reply = capture(
        chunk({"tool_calls": "nope"}),
        chunk({"tool_calls": ["nope", call_frag(0, id="c", function="nope")]}),
        chunk({"tool_calls": [call_frag(0, function={"name": 3, "arguments": 4})]}),
        chunk({"tool_calls": [call_frag(True, function={"name": "f"})]}),
    )
    assert reply is not None
    # The bool index is not index 1: it joins the latest call instead of making a new one.
    assert reply.tool_calls == (
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}},
    )


def test_tool_call_reply_converts_to_an_assistant_message() -> None:
    _, reply = capture(
        chunk({"tool_calls": [call_frag(0, id="c", function={"name": "f", "arguments": "{}"})]})
    )
    assert reply is not None
    message = reply.as_message()
    assert message.role == "assistant"
    assert message.tool_calls == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]


# --- [DONE], end of stream, errors, junk ------------------------------------------------------


def test_feed_is_true_only_for_the_chunk_completing_done() -> None:
    cap = StreamCapture()
    assert cap.feed(chunk({"content": "hi"})) is False
    assert cap.feed(b"data: [DO") is False
    assert cap.feed(b"NE]\n") is False
    assert not cap.done
    assert cap.feed(b"\n") is True
    assert cap.done
    assert cap.feed(b": trailing comment\n\n") is False
    assert cap.finish() == Reply(content="hi")


@pytest.mark.parametrize("cut", range(1, len(DONE)))
def test_done_split_anywhere_reports_on_the_last_piece(cut: int) -> None:
    cap = StreamCapture()
    cap.feed(chunk({"content": "hi"}))
    assert [cap.feed(DONE[:cut]), cap.feed(DONE[cut:])] == [False, True]


def test_done_with_crlf_completes_on_the_cr_not_the_trailing_lf() -> None:
    cap = StreamCapture()
    assert cap.feed(b"data: [DONE]\r\n\r") is True
    assert cap.feed(b"\n") is False


def test_done_and_content_in_one_chunk() -> None:
    cap = StreamCapture()
    assert cap.feed(chunk({"content": "hi"}) + DONE) is True
    assert cap.finish() == Reply(content="hi")


def test_events_after_done_are_ignored() -> None:
    cap = StreamCapture()
    assert cap.feed(chunk({"content": "hi"}) + DONE + chunk({"content": " there"})) is True
    cap.feed(sse({"error": {"message": "late"}}))
    cap.feed(DONE)
    assert cap.finish() == Reply(content="hi")
    assert not cap.errored


def test_stream_without_done_still_yields_a_reply() -> None:
    cap, reply = capture(chunk({"content": "partial"}), chunk({}, finish_reason="stop"), end=b"")
    assert reply == Reply(content="partial", finish_reason="stop")
    assert not cap.done
    assert cap.complete


def test_done_without_finish_reason_yields_a_reply() -> None:
    cap, reply = capture(chunk({"content": "whole"}))
    assert reply == Reply(content="whole")
    assert cap.complete


@pytest.mark.parametrize(
    "stream",
    [
        chunk({"content": "cut off"}),
        chunk({"content": "cut off"}) + b'data: {"choices": [{"index": 0, "delta": {"cont',
        # a finish_reason of another choice says nothing about choice 0
        chunk({"content": "cut off"}) + chunk({}, finish_reason="stop", index=1),
        chunk({"content": "cut off"}) + b"data: [DONE",
    ],
)
def test_truncated_stream_is_no_reply(stream: bytes) -> None:
    cap, reply = capture(stream, end=b"")
    assert reply is None
    assert not cap.complete


def test_last_event_without_blank_line_is_captured_at_finish() -> None:
    cap, reply = capture(
        b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}',
        end=b"",
    )
    assert reply == Reply(content="x", finish_reason="stop")
    assert not cap.done


def test_unterminated_done_counts_at_finish() -> None:
    cap = StreamCapture()
    assert cap.feed(chunk({"content": "hi"}) + b"data: [DONE]") is False
    assert cap.has_partial_line
    assert cap.finish() == Reply(content="hi")
    assert cap.done
    assert not cap.has_partial_line


def test_truncated_final_line_is_ignored() -> None:
    _, reply = capture(
        chunk({"content": "kept"}, finish_reason="stop"),
        b'data: {"choices": [{"delta": {"content": "lo',
        end=b"",
    )
    assert reply == Reply(content="kept", finish_reason="stop")


@pytest.mark.parametrize(
    "error",
    [
        sse({"error": {"message": "overloaded", "code": 529}}),
        sse({"error": "boom"}),
        b"event: error\ndata: upstream died\n\n",
    ],
)
def test_error_event_means_no_reply(error: bytes) -> None:
    cap, reply = capture(chunk({"content": "half an answ"}), error, DONE)
    assert reply is None
    assert cap.errored


def test_null_error_field_is_not_an_error() -> None:
    cap, reply = capture(chunk({"content": "fine"}, error=None))
    assert reply == Reply(content="fine")
    assert not cap.errored


@pytest.mark.parametrize(
    "junk",
    [
        b"data: {not json\n\n",
        b"data: 42\n\n",
        b'data: ["choices"]\n\n',
        b"data: " + b"[" * 100_000 + b"\n\n",
        b"event: ping\ndata: hello\n\n",
        b'data: {"choices": {"0": 1}}\n\n',
        b'data: {"choices": [{"index": 0, "delta": "text"}]}\n\n',
        b"data: \xff\xfe\n\n",
        b": keep-alive\n\n",
    ],
)
def test_junk_events_are_ignored(junk: bytes) -> None:
    cap, reply = capture(chunk({"content": "a"}), junk, chunk({"content": "b"}), DONE)
    assert reply == Reply(content="ab")
    assert not cap.errored


@pytest.mark.parametrize(
    "stream",
    [
        b"",
        DONE,
        chunk({"role": "assistant"}) + chunk({}, finish_reason="stop") + DONE,
        chunk({"content": ""}) + usage_chunk(USAGE) + DONE,
    ],
)
def test_nothing_usable_means_none(stream: bytes) -> None:
    _, reply = capture(stream)
    assert reply is None


def test_has_partial_line_delegates_to_the_parser() -> None:
    cap = StreamCapture()
    assert not cap.has_partial_line
    cap.feed(b'data: {"cho')
    assert cap.has_partial_line
    cap.feed(b'ices": []}\n')
    assert not cap.has_partial_line


# --- property: a realistic stream split anywhere captures the same reply ----------------------


@dataclass(frozen=True)
class Wire:
    raw: bytes
    done_at: int  # offset of the byte that completes the [DONE] event


CONTENT = st.one_of(
    st.sampled_from(["héllo 你好 🎉", "line\nbreak", "\u2028", '"quoted"', " ", "ok"]),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8),
)
EOLS = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def wire_streams(draw: st.DrawFn) -> tuple[Wire, Reply]:
    payloads: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for thought in draw(st.lists(CONTENT, max_size=2)):
        payloads.append({"choices": [{"index": 0, "delta": {"reasoning_content": thought}}]})
    pieces = draw(st.lists(CONTENT, max_size=5))
    for piece in pieces:
        payloads.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    args = draw(st.lists(CONTENT, max_size=3))
    calls: tuple[dict[str, Any], ...] = ()
    if args or not pieces:
        name = draw(st.sampled_from(["lookup", "get_wéather"]))
        first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name}}
        payloads.append({"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]})
        for arg in args:
            frag = {"index": 0, "function": {"arguments": arg}}
            payloads.append({"choices": [{"index": 0, "delta": {"tool_calls": [frag]}}]})
        function = {"name": name, "arguments": "".join(args)}
        calls = ({"id": "call_1", "type": "function", "function": function},)
    payloads.append({"choices": [{"index": 1, "delta": {"content": "other choice"}}]})
    payloads.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    payloads.append({"choices": [], "usage": USAGE})

    lines: list[tuple[str, str]] = []

    def comment() -> None:
        if draw(st.booleans()):
            lines.append((draw(st.sampled_from([": keep-alive", ":", ": PROCESSING"])), draw(EOLS)))
            if draw(st.booleans()):
                lines.append(("", draw(EOLS)))

    for payload in payloads:
        comment()
        text = json.dumps(payload, ensure_ascii=False)
        prefix = draw(st.sampled_from(["data: ", "data:"]))
        if draw(st.booleans()):
            # JSON tolerates the newline that joins two data lines.
            lines.append((prefix + text[:1], draw(EOLS)))
            text = text[1:]
        lines.append((prefix + text, draw(EOLS)))
        lines.append(("", draw(EOLS)))
    comment()
    lines.append((draw(st.sampled_from(["data: ", "data:"])) + "[DONE]", draw(EOLS)))
    lines.append(("", draw(EOLS)))

    out = bytearray()
    done_at = -1
    previous = ""
    for i, (text, eol) in enumerate(lines):
        # A lone CR followed by a blank line ending in LF would be one CRLF on the wire.
        if previous == "\r" and not text and eol == "\n":
            eol = "\r\n"
        out += text.encode()
        if i == len(lines) - 1:
            done_at = len(out)
        out += eol.encode()
        previous = eol
    reply = Reply(
        content="".join(pieces) or None, tool_calls=calls, finish_reason="stop", usage=USAGE
    )
    return Wire(bytes(out), done_at), reply


@settings(max_examples=300)
@given(stream=wire_streams(), data=st.data())
def test_split_stream_captures_like_the_unsplit_stream(
    stream: tuple[Wire, Reply], data: st.DataObject
) -> None:
    wire, expected = stream
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire.raw)), max_size=12)))
    bounds = [0, *cuts, len(wire.raw)]
    cap = StreamCapture()
    flags = [cap.feed(wire.raw[a:b]) for a, b in itertools.pairwise(bounds)]
    reply = cap.finish()
    assert reply == expected
    assert reply is not None
    assert reply.usage == USAGE
    assert flags == [a <= wire.done_at < b for a, b in itertools.pairwise(bounds)]


@settings(max_examples=50)
@given(stream=wire_streams())
def test_byte_at_a_time_captures_like_the_unsplit_stream(stream: tuple[Wire, Reply]) -> None:
    wire, expected = stream
    cap = StreamCapture()
    flags = [cap.feed(wire.raw[i : i + 1]) for i in range(len(wire.raw))]
    assert cap.finish() == expected
    assert flags.index(True) == wire.done_at
    assert flags.count(True) == 1


@settings(max_examples=200)
@given(raw=st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    cap = StreamCapture()
    cap.feed(raw)
    cap.finish()


# --- reply_from_json -------------------------------------------------------------------------


def completion(message: dict[str, Any], **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        **extra,
    }
    return json.dumps(body).encode()


def test_json_reply_with_content_and_usage() -> None:
    reply = reply_from_json(
        completion(
            {"role": "assistant", "content": "Hi é", "reasoning_content": "hmm"}, usage=USAGE
        )
    )
    assert reply == Reply(content="Hi é", finish_reason="stop")
    assert reply is not None
    assert reply.usage == USAGE


def test_json_reply_keeps_tool_calls_as_given() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a":1}'},
        "extra": True,
    }
    reply = reply_from_json(
        completion({"role": "assistant", "content": None, "tool_calls": [call]})
    )
    assert reply == Reply(content=None, tool_calls=(call,), finish_reason="stop")


def test_json_reply_skips_non_object_tool_calls() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    reply = reply_from_json(completion({"content": None, "tool_calls": ["x", call, 3]}))
    assert reply is not None
    assert reply.tool_calls == (call,)


def test_json_reply_reads_only_the_first_choice() -> None:
    body = {
        "choices": [
            {"message": {"content": "first"}, "finish_reason": "length"},
            {"message": {"content": "second"}, "finish_reason": "stop"},
        ]
    }
    assert reply_from_json(json.dumps(body).encode()) == Reply(
        content="first", finish_reason="length"
    )


def test_json_reply_joins_text_parts() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    reply = reply_from_json(completion({"content": parts}))
    assert reply is not None
    assert reply.content == "ab"


def test_json_reply_ignores_odd_finish_reason_and_usage() -> None:
    body = {"choices": [{"message": {"content": "x"}, "finish_reason": 1}], "usage": [1]}
    reply = reply_from_json(json.dumps(body).encode())
    assert reply == Reply(content="x", finish_reason=None)
    assert reply is not None
    assert reply.usage is None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"\xff\xfe\xfd",
        b"[" * 100_000,
        b"[]",
        b'"string"',
        b"{}",
        b'{"choices": null}',
        b'{"choices": []}',
        b'{"choices": ["x"]}',
        b'{"choices": [{"message": "x"}]}',
        b'{"choices": [{"finish_reason": "stop"}]}',
        b'{"error": {"message": "bad request"}}',
        completion({"role": "assistant"}),
        completion({"role": "assistant", "content": ""}),
        completion({"role": "assistant", "content": None, "tool_calls": []}),
        completion({"role": "assistant", "content": [{"type": "image_url"}]}),
        completion({"role": "assistant", "content": 7}),
        completion({"role": "assistant", "content": None, "reasoning_content": "thinking"}),
    ],
)
def test_json_reply_none_when_nothing_usable(body: bytes) -> None:
    assert reply_from_json(body) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200)
@given(
    choice=st.dictionaries(
        st.sampled_from(["message", "finish_reason", "index", "delta"]), JSON, max_size=3
    ),
    usage=JSON,
)
def test_json_reply_never_raises_on_odd_shapes(choice: dict[str, Any], usage: Any) -> None:
    reply = reply_from_json(json.dumps({"choices": [choice], "usage": usage}).encode())
    assert reply is None or reply.content is not None or reply.tool_calls


# --- the capture limit -----------------------------------------------------------------------


def test_capture_stops_past_its_limit_and_has_no_reply() -> None:
    first = chunk({"content": "a" * 50})
    cap = StreamCapture(limit=len(first) + 10)
    assert cap.feed(first) is False
    assert not cap.overflowed
    assert cap.feed(chunk({"content": "b" * 50})) is False
    assert cap.overflowed
    # Past the limit not even [DONE] counts: the turn is not stored.
    assert cap.feed(DONE) is False
    assert cap.finish() is None


def test_capture_up_to_its_limit_exactly_is_kept() -> None:
    stream = chunk({"content": "fits"}) + DONE
    cap = StreamCapture(limit=len(stream))
    assert cap.feed(stream) is True
    assert cap.finish() == Reply(content="fits")
    assert not cap.overflowed
