"""Capturing a Responses API answer: from the response object, from the stream's final event,
from the deltas when the final event leaves the output out, and never from a failed stream."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.fakes.upstream import Scenario, ToolCall
from tests.fakes.upstream import responses as responses_api

from memory_bridge.chat.responses_capture import (
    ResponsesStreamCapture,
    reply_from_response_json,
    responses_stream_error,
)
from memory_bridge.core.turn import Reply

CALL = ToolCall("get_weather", {"city": "Zürich"}, id="call_w")


def stream(scenario: Scenario) -> list[bytes]:
    return responses_api.events(scenario, {"input": "hi"}, "resp_1", 0, 1)


def feed(events: list[bytes], size: int | None = None) -> tuple[ResponsesStreamCapture, list[int]]:
    """Feed a stream cut into reads of `size` bytes (one event a read by default); the reads
    for which `feed` said "final event complete"."""
    body = b"".join(events)
    reads = events if size is None else [body[i : i + size] for i in range(0, len(body), size)]
    cap = ResponsesStreamCapture()
    finals = [n for n, read in enumerate(reads) if cap.feed(read)]
    return cap, finals


@pytest.mark.parametrize("size", [None, 1, 7, 64])
def test_the_final_event_gives_the_reply_whatever_the_reads(size: int | None) -> None:
    events = stream(Scenario(content="Grüezi, 世界 ✓", reasoning="SECRET-THOUGHT"))
    cap, finals = feed(events, size)
    assert len(finals) == 1
    # The read that completed response.completed is the last one (nothing follows it).
    reads = len(events) if size is None else -(-len(b"".join(events)) // size)
    assert finals == [reads - 1]
    reply = cap.finish()
    assert reply is not None
    assert (reply.content, reply.tool_calls, reply.finish_reason) == ("Grüezi, 世界 ✓", (), "stop")
    assert reply.usage is not None and reply.usage["output_tokens"] > 0
    assert "SECRET-THOUGHT" not in json.dumps(reply.as_message().to_dict())


@pytest.mark.parametrize("bare", [False, True], ids=["final-output", "deltas"])
def test_function_calls_from_the_final_event_or_from_the_deltas(bare: bool) -> None:
    """Some upstreams' final event leaves the output out: then the deltas say what it was."""
    scenario = Scenario(content="Checking.", tool_calls=[CALL], bare_completed=bare)
    events = stream(scenario)
    if bare:
        final = json.loads(events[-1].split(b"data: ", 1)[1])
        assert final["response"]["output"] == []
    cap, _ = feed(events, 5)
    arguments = json.dumps({"city": "Zürich"}, separators=(",", ":"), ensure_ascii=False)
    assert cap.finish() == Reply(
        content="Checking.",
        tool_calls=(
            {
                "id": "call_w",
                "type": "function",
                "function": {"name": "get_weather", "arguments": arguments},
            },
        ),
        finish_reason="tool_calls",
    )


def test_deltas_alone_without_item_events() -> None:
    """A minimal upstream: data lines without `event:` names, text deltas, a bare final event."""
    lines = [
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "lo"},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"},
        {"type": "response.completed", "response": {"status": "completed"}},
    ]
    cap, finals = feed([f"data: {json.dumps(e)}\n\n".encode() for e in lines])
    assert finals == [3]
    reply = cap.finish()
    # A call whose id and name never came could not be replayed: it is not remembered.
    assert reply is not None and (reply.content, reply.tool_calls) == ("Hello", ())


def test_incomplete_is_a_turn_cut_by_a_limit() -> None:
    cap, finals = feed(stream(Scenario(content="Half an ans", response_status="incomplete")))
    assert finals
    reply = cap.finish()
    assert reply is not None and (reply.content, reply.finish_reason) == ("Half an ans", "length")


def test_a_failed_response_is_not_a_turn() -> None:
    cap, finals = feed(stream(Scenario(response_status="failed")))
    assert finals and cap.done and not cap.complete
    assert cap.finish() is None


def test_an_error_event_is_not_a_turn() -> None:
    events = stream(Scenario(content="partial"))
    error = b'event: error\ndata: {"type":"error","code":"x","message":"m","sequence_number":9}\n\n'
    cap, _ = feed([*events[:-1], error, events[-1]])
    assert cap.finish() is None


def test_a_stream_without_its_final_event_is_not_a_turn() -> None:
    cap, finals = feed(stream(Scenario(content="cut short", omit_done=True)))
    assert finals == [] and not cap.complete and not cap.done
    assert cap.finish() is None


def test_nothing_after_the_final_event_counts() -> None:
    events = stream(Scenario(content="first"))
    extra = responses_api.events(Scenario(content="second"), {}, "resp_2", 0, 2)
    cap, finals = feed([*events, *extra])
    assert finals == [len(events) - 1]
    reply = cap.finish()
    assert reply is not None and reply.content == "first"


def test_over_the_limit_the_capture_stops() -> None:
    events = stream(Scenario(content="a long answer " * 20))
    cap = ResponsesStreamCapture(limit=len(b"".join(events)) - 1)
    assert not any(cap.feed(e) for e in events)
    assert cap.overflowed and cap.finish() is None


def response(**fields: Any) -> bytes:
    items = responses_api.output_items(Scenario(content="Done.", tool_calls=[CALL]), 1)
    return json.dumps(
        {"object": "response", "status": "completed", "output": items, **fields}
    ).encode()


def test_a_whole_response_object() -> None:
    reply = reply_from_response_json(response(usage={"total_tokens": 3}))
    assert reply is not None
    assert (reply.content, reply.finish_reason, reply.usage) == (
        "Done.",
        "tool_calls",
        {"total_tokens": 3},
    )
    assert reply.tool_calls[0]["id"] == "call_w"


@pytest.mark.parametrize(
    "body",
    [
        response(status="failed"),
        response(status="queued"),  # a background response: nothing to remember yet
        response(output="nope"),
        b'{"object": "response", "status": "completed", "output": []}',
        b"not json",
        b"[]",
    ],
)
def test_responses_without_a_turn(body: bytes) -> None:
    assert reply_from_response_json(body) is None


def test_the_error_event_follows_the_last_sequence_number() -> None:
    events = stream(Scenario(content="abc"))
    raw = responses_stream_error(ConnectionResetError(), events[3])
    name, data = raw.decode().removesuffix("\n\n").split("\n")
    assert name == "event: error"
    event = json.loads(data.removeprefix("data: "))
    assert event["type"] == "error" and event["sequence_number"] == 4
    assert event["code"] == "upstream_stream_error" and "ConnectionResetError" in event["message"]
    assert event["error"]["type"] == "upstream_stream_error"
    assert (
        json.loads(responses_stream_error(OSError(), b": keep-alive\n\n").split(b"data: ")[1])[
            "sequence_number"
        ]
        == 0
    )
