"""Streaming through the proxy: the client gets the upstream's SSE bytes exactly, the side
parser still captures the reply, and a broken upstream stream ends in an in-band error."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import (
    assistant,
    injected,
    last_messages,
    sse_data,
    stream_raw,
    user,
)
from tests.support.proxy import Proxy

MODEL = "gpt-4o-mini"
MULTIBYTE = "Grüße aus Zürich ✓ — 日本語のテキスト 🎉🎉 fin"

BYTE_CASES: dict[str, tuple[Scenario, str]] = {
    "events": (Scenario(content=MULTIBYTE), MULTIBYTE),
    "split-3": (Scenario(content=MULTIBYTE, chunk_size=3), MULTIBYTE),
    "split-1": (Scenario(content="a é 日 🎉", chunk_size=1), "a é 日 🎉"),
    "split-5-omit-done": (Scenario(content=MULTIBYTE, chunk_size=5, omit_done=True), MULTIBYTE),
    "omit-done": (Scenario(content="no done marker", omit_done=True), "no done marker"),
    "reasoning": (Scenario(content="shown", reasoning="hidden", chunk_size=4), "shown"),
    "crlf-comments-nospace": (
        Scenario(
            raw_sse=(
                b": keep-alive\r\n\r\n"
                b'data:{"choices":[{"index":0,"delta":{"role":"assistant","content":"Bon"}}]}'
                b"\r\n\r\n"
                b": another comment\r\n"
                b'data: {"choices":[{"index":0,"delta":{"content":"jour \xe4\xb8\x96"}}]}\r\n\r\n'
                b'data:{"choices":[{"index":0,"delta":{"content":"\xe7\x95\x8c"},'
                b'"finish_reason":"stop"}]}\r\n\r\n'
                b"data:[DONE]\r\n\r\n"
            ),
            chunk_size=4,
        ),
        "Bonjour 世界",
    ),
    "lone-cr": (
        Scenario(
            raw_sse=(
                b'data: {"choices":[{"index":0,"delta":{"content":"cr "}}]}\r\r'
                b'data: {"choices":[{"index":0,"delta":{"content":"only"}}]}\r\r'
                b"data: [DONE]\r\r"
            ),
            chunk_size=9,
        ),
        "cr only",
    ),
}


@pytest.mark.parametrize("case", list(BYTE_CASES))
def test_sse_bytes_reach_the_client_exactly_and_the_reply_is_captured(
    proxy: Proxy, upstream: FakeUpstream, case: str
) -> None:
    scenario, reply_text = BYTE_CASES[case]
    _, token = proxy.create_token()
    upstream.enqueue(scenario)
    response, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("go")]})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert raw == upstream.sent_bytes[-1]
    assert len(raw) > 0

    # The side parser understood the same bytes: the turn is history for the next request.
    proxy.chat(token, model=MODEL, messages=[user("next")])
    assert injected(upstream, [user("next")]) == [user("go"), assistant(reply_text)]


def test_tool_call_stream_bytes_are_exact(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(
        Scenario(
            tool_calls=[ToolCall("lookup", {"q": "naïve café", "n": 3}, id="call_q")],
            chunk_size=6,
        )
    )
    _, raw = stream_raw(
        proxy,
        token,
        {"model": MODEL, "messages": [user("search")], "stream_options": {"include_usage": True}},
    )
    assert raw == upstream.sent_bytes[-1]
    proxy.chat(token, model=MODEL, messages=[user("next")])
    [stored_call] = injected(upstream, [user("next")])[1]["tool_calls"]
    assert stored_call["id"] == "call_q"
    assert stored_call["function"]["name"] == "lookup"
    assert json.loads(stored_call["function"]["arguments"]) == {"q": "naïve café", "n": 3}


@pytest.mark.parametrize("chunk_size", [None, 10])
def test_mid_stream_failure_ends_with_an_in_band_error_and_stores_nothing(
    proxy: Proxy, upstream: FakeUpstream, chunk_size: int | None
) -> None:
    _, token = proxy.create_token()
    content = "one two three four five six seven eight"
    upstream.enqueue(Scenario(content=content, chunk_size=chunk_size, disconnect_after_chunks=3))
    response, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("count")]})
    assert response.status_code == 200
    sent = upstream.sent_bytes[-1]
    # Whole events only: an event the upstream broke off inside is dropped.
    end = sent.rfind(b"\n\n")
    whole = sent[: end + 2] if end >= 0 else b""
    assert len(whole) == len(sent) or chunk_size is not None
    assert raw.startswith(whole)
    tail = raw[len(whole) :]
    assert tail.startswith(b'data: {"error": ')
    assert tail.endswith(b"\n\ndata: [DONE]\n\n")
    assert tail.count(b"\n\n") == 2
    events = sse_data(raw)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["message"] and error["type"]
    assert re.search(rb'"finish_reason":\s*"', raw) is None  # never a fake "stop"

    # nothing of the broken turn is remembered
    proxy.chat(token, model=MODEL, messages=[user("again")])
    assert last_messages(upstream) == [user("again")]


def test_mid_stream_failure_raises_in_the_sdk(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="alpha beta gamma delta", disconnect_after_chunks=3))
    seen: list[str] = []
    finish: list[Any] = []
    with pytest.raises(openai.APIError) as info:  # noqa: PT012
        for chunk in proxy.client(token).chat.completions.create(
            model=MODEL, messages=[user("hi")], stream=True
        ):
            seen.append(chunk.choices[0].delta.content or "")
            finish.append(chunk.choices[0].finish_reason)
    assert not isinstance(info.value, openai.APIConnectionError)  # the in-band error, not EOF
    assert "".join(seen) == "alpha beta "
    assert finish == [None, None, None]

    proxy.client(token).chat.completions.create(model=MODEL, messages=[user("again")])
    assert last_messages(upstream) == [user("again")]


def test_stream_that_ends_cleanly_without_done_is_stored(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="finished anyway", omit_done=True))
    chunks = list(
        proxy.client(token).chat.completions.create(model=MODEL, messages=[user("hi")], stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "finished anyway"
    assert b"[DONE]" not in upstream.sent_bytes[-1]
    proxy.client(token).chat.completions.create(model=MODEL, messages=[user("next")])
    assert injected(upstream, [user("next")]) == [user("hi"), assistant("finished anyway")]


def test_upstream_ignoring_stream_flag_passes_json_through(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    """An upstream that answers a stream request with a JSON error (non-SSE) is passed on."""
    _, token = proxy.create_token()
    body = b'{"error": {"message": "overloaded", "type": "server_error"}}'
    upstream.enqueue(Scenario(status=503, error_body=body))
    response, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert response.status_code == 503
    assert raw == body
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "error_event",
    [
        b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
        b'event: error\ndata: {"message": "overloaded"}\n\n',
    ],
)
def test_upstream_in_band_error_passes_through_and_is_not_stored(
    proxy: Proxy, upstream: FakeUpstream, error_event: bytes
) -> None:
    _, token = proxy.create_token()
    raw_sse = (
        b'data: {"choices":[{"index":0,"delta":{"content":"partial "}}]}\n\n'
        + error_event
        + b"data: [DONE]\n\n"
    )
    upstream.enqueue(Scenario(raw_sse=raw_sse))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == raw_sse
    proxy.chat(token, model=MODEL, messages=[user("again")])
    assert last_messages(upstream) == [user("again")]
