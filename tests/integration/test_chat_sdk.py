"""The official `openai` SDK against the running proxy: plain chat, streaming, tool calls,
usage chunks, reasoning text and errors, each checked against what the upstream received."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import (
    assistant,
    closed_port_url,
    injected,
    last_messages,
    user,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy

MODEL = "gpt-4o-mini"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def test_non_streaming_chat_returns_the_upstream_completion(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="Bonjour, Ada ✓", id="chatcmpl-abc"))
    completion = proxy.client(token).chat.completions.create(
        model=MODEL, messages=[user("Hello")], temperature=0.2
    )
    assert completion.id == "chatcmpl-abc"
    assert completion.model == MODEL
    assert completion.system_fingerprint == "fp_fake"
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content) == ("assistant", "Bonjour, Ada ✓")
    assert choice.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 1

    [sent] = upstream.chat_requests
    assert sent.json["messages"] == [user("Hello")]
    assert sent.json["temperature"] == 0.2
    assert "stream" not in sent.json
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_streaming_chat_reassembles_in_the_sdk(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    text = "Streaming works — über alles, 日本語 too."
    upstream.enqueue(Scenario(content=text))
    stream = proxy.client(token).chat.completions.create(
        model=MODEL, messages=[user("Stream please")], stream=True
    )
    deltas: list[str] = []
    finish: list[str | None] = []
    for chunk in stream:
        deltas.append(chunk.choices[0].delta.content or "")
        finish.append(chunk.choices[0].finish_reason)
    assert "".join(deltas) == text
    assert sum(1 for d in deltas if d) > 3
    assert finish[-1] == "stop" and finish.count("stop") == 1
    assert upstream.chat_requests[-1].json["stream"] is True

    # the streamed turn is remembered
    client = proxy.client(token)
    client.chat.completions.create(model=MODEL, messages=[user("And now?")])
    assert injected(upstream, [user("And now?")]) == [user("Stream please"), assistant(text)]


def test_include_usage_delivers_the_usage_only_final_chunk(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    upstream.enqueue(Scenario(content="counted reply", usage=usage))
    chunks = list(
        proxy.client(token).chat.completions.create(
            model=MODEL,
            messages=[user("count me")],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert upstream.chat_requests[-1].json["stream_options"] == {"include_usage": True}
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (11, 7)
    assert last.usage.total_tokens == 18
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "counted reply"


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_streamed_tool_calls_reassemble_and_restore_in_history(
    proxy: Proxy, upstream: FakeUpstream, chunk_size: int | None
) -> None:
    """Tool-call deltas split over chunks (and chunks split mid-line) reach the SDK intact;
    the stored assistant tool_calls plus the next request's tool message form a valid chain."""
    _, token = proxy.create_token()
    client = proxy.client(token)
    calls = [
        ToolCall("get_weather", {"city": "Zürich", "when": "today"}, id="call_w"),
        ToolCall("get_weather", {"city": "Genève"}, id="call_g"),
    ]
    upstream.enqueue(Scenario(tool_calls=calls, chunk_size=chunk_size))
    with client.chat.completions.stream(
        model=MODEL, messages=[user("Weather in Zürich and Genève?")], tools=TOOLS
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    got = choice.message.tool_calls
    assert got is not None
    assert [(c.id, c.function.name) for c in got] == [
        ("call_w", "get_weather"),
        ("call_g", "get_weather"),
    ]
    assert json.loads(got[0].function.arguments) == {"city": "Zürich", "when": "today"}
    assert json.loads(got[1].function.arguments) == {"city": "Genève"}
    assert upstream.chat_requests[-1].json["tools"] == TOOLS

    # A stateless client sends only the tool results; the proxy restores the chain.
    results = [
        {"role": "tool", "tool_call_id": "call_w", "content": "12°C"},
        {"role": "tool", "tool_call_id": "call_g", "content": "15°C"},
    ]
    upstream.enqueue(Scenario(content="Zürich 12°C, Genève 15°C."))
    reply = client.chat.completions.create(model=MODEL, messages=results, tools=TOOLS)
    assert reply.choices[0].message.content == "Zürich 12°C, Genève 15°C."
    expected_calls = [
        {
            "id": "call_w",
            "type": "function",
            "function": {"name": "get_weather", "arguments": calls[0].arguments_json()},
        },
        {
            "id": "call_g",
            "type": "function",
            "function": {"name": "get_weather", "arguments": calls[1].arguments_json()},
        },
    ]
    assert injected(upstream, results) == [
        user("Weather in Zürich and Genève?"),
        assistant(None, tool_calls=expected_calls),
    ]

    # and the whole chain, tool results included, is history for the turn after
    client.chat.completions.create(model=MODEL, messages=[user("Thanks!")])
    assert injected(upstream, [user("Thanks!")]) == [
        user("Weather in Zürich and Genève?"),
        assistant(None, tool_calls=expected_calls),
        *results,
        assistant("Zürich 12°C, Genève 15°C."),
    ]


def test_non_streaming_tool_call_chain_with_a_resending_client(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    """The usual agent loop: append the SDK's assistant message and the tool result, resend."""
    _, token = proxy.create_token()
    client = proxy.client(token)
    upstream.enqueue(Scenario(tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]))
    messages: list[Any] = [user("Weather in Oslo?")]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    message = first.choices[0].message
    assert message.tool_calls is not None
    call_id = message.tool_calls[0].id
    messages += [message, {"role": "tool", "tool_call_id": call_id, "content": "-3°C"}]

    upstream.enqueue(Scenario(content="It is -3°C in Oslo."))
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    forwarded = last_messages(upstream)
    # nothing injected twice: exactly the client's three messages
    assert [m["role"] for m in forwarded] == ["user", "assistant", "tool"]
    assert forwarded[1]["tool_calls"][0]["id"] == call_id
    messages.append(second.choices[0].message)

    messages.append(user("And tomorrow?"))
    client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert [m["role"] for m in last_messages(upstream)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_reaches_the_client_but_is_never_stored(
    proxy: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    upstream.enqueue(Scenario(content="The answer is 42.", reasoning="Secret chain of thought."))
    if stream:
        reasoning, content = [], []
        for chunk in client.chat.completions.create(
            model=MODEL, messages=[user("Meaning of life?")], stream=True
        ):
            delta = chunk.choices[0].delta
            reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
            content.append(delta.content or "")
        assert "".join(reasoning) == "Secret chain of thought."
        assert "".join(content) == "The answer is 42."
    else:
        completion = client.chat.completions.create(
            model=MODEL, messages=[user("Meaning of life?")]
        )
        message = completion.choices[0].message
        assert message.content == "The answer is 42."
        assert (message.model_extra or {})["reasoning_content"] == "Secret chain of thought."

    client.chat.completions.create(model=MODEL, messages=[user("Why?")])
    history = injected(upstream, [user("Why?")])
    assert history == [user("Meaning of life?"), assistant("The answer is 42.")]
    assert "Secret chain" not in json.dumps(last_messages(upstream))


ERROR_CASES = [
    (400, openai.BadRequestError),
    (401, openai.AuthenticationError),
    (429, openai.RateLimitError),
    (500, openai.InternalServerError),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "exc_type"), ERROR_CASES)
def test_upstream_http_errors_pass_through_unchanged(
    proxy: Proxy,
    upstream: FakeUpstream,
    status: int,
    exc_type: type[openai.APIStatusError],
    stream: bool,
) -> None:
    _, token = proxy.create_token()
    body = (
        b'{"error": {"message": "upstream says no (%d)", "type": "weird_type",'
        b' "param": "messages", "code": "x_%d"}}' % (status, status)
    )
    upstream.enqueue(
        Scenario(status=status, error_body=body, headers={"x-ratelimit-remaining-requests": "0"})
    )
    with pytest.raises(exc_type) as info:
        proxy.client(token).chat.completions.create(
            model=MODEL, messages=[user("hi")], stream=stream
        )
    error = info.value
    assert error.status_code == status
    assert error.response.content == body
    assert error.body == json.loads(body)["error"]
    assert error.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(upstream.chat_requests) == 1

    # a failed turn is not remembered
    proxy.client(token).chat.completions.create(model=MODEL, messages=[user("again")])
    assert last_messages(upstream) == [user("again")]


@pytest.mark.parametrize("stream", [False, True])
def test_unreachable_upstream_is_our_502(proxy: Proxy, stream: bool) -> None:
    _, token = proxy.create_token(llm_base_url=closed_port_url())
    with pytest.raises(openai.InternalServerError) as info:
        proxy.client(token).chat.completions.create(
            model=MODEL, messages=[user("hi")], stream=stream
        )
    error = info.value
    assert error.status_code == 502
    assert isinstance(error.body, dict)
    assert error.body["type"] == "upstream_unavailable"
    assert "upstream" in error.body["message"].lower()
    assert error.body["request_id"] == error.response.headers["x-request-id"]


def test_our_validation_errors_are_unprocessable_entity(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    bad: list[Any] = [{"role": "robot", "content": "beep"}]
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client.chat.completions.create(model=MODEL, messages=bad)
    assert info.value.status_code == 422
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "invalid_request_error"
    assert "messages[0].role" in info.value.body["message"]
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model=MODEL, messages=bad, stream=True)
    assert upstream.chat_requests == []


def test_sdk_with_raw_response_sees_our_request_id(proxy: Proxy, upstream: FakeUpstream) -> None:
    """The upstream's own x-request-id must not make ours ambiguous (one value, ours)."""
    _, token = proxy.create_token()
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model=MODEL, messages=[user("hi")]
    )
    ids = raw.headers.get_list("x-request-id")
    assert len(ids) == 1
    assert len(ids[0]) == 8 and int(ids[0], 16) >= 0
    assert raw.parse().choices[0].message.content
    # the upstream's id is kept under its own name
    assert raw.headers.get_list("x-upstream-request-id") == ["req_fake_1"]
