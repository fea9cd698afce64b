"""What the proxy forwards and returns: request fields, messages, headers both ways, and the
passthrough endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import (
    assistant,
    auth,
    injected,
    injected_counts,
    last_messages,
    stream_raw,
    user,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy

MODEL = "gpt-4o-mini"

EVERY_FIELD: dict[str, Any] = {
    "model": "vendor/model-x",
    "temperature": 0.7,
    "top_p": 0.95,
    "max_tokens": 123,
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look it up — schnell",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ],
    "tool_choice": {"type": "function", "function": {"name": "lookup"}},
    "response_format": {"type": "json_object"},
    "n": 1,
    "seed": 42,
    "logprobs": True,
    "top_logprobs": 2,
    "stop": ["\n\n", "END"],
    "presence_penalty": -0.5,
    "metadata": {"note": "日本語 ✓"},
    "top_k": 3,
    "extra": {"a": [1, 2.5], "b": None, "c": {"deep": [True, False]}},
}


def _others(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "messages"}


@pytest.mark.parametrize("stream", [False, True])
def test_every_field_but_messages_reaches_the_upstream_unchanged(
    proxy: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    _, token = proxy.create_token()
    extra: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    body = {**EVERY_FIELD, **(extra if stream else {})}

    # First turn: nothing to inject, the body is forwarded byte for byte.
    raw = json.dumps({**body, "messages": [user("first")]}).encode()
    reply = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers=auth(token, **{"content-type": "application/json"}),
        timeout=30,
    )
    assert reply.status_code == 200
    assert upstream.chat_requests[-1].body == raw

    # Second turn: history is injected, only `messages` differs.
    second = {**body, "messages": [user("second")]}
    if stream:
        stream_raw(proxy, token, second)
    else:
        assert proxy.chat(token, **second).status_code == 200
    sent = upstream.chat_requests[-1].json
    assert _others(sent) == _others(second)
    assert list(sent) == list(second)  # same keys, same order
    assert len(sent["messages"]) == 3


def test_vendor_extensions_via_the_sdk(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    for text in ("one", "two"):  # the second request carries injected history
        client.chat.completions.create(
            model=MODEL,
            messages=[user(text)],
            seed=7,
            extra_body={"top_k": 3, "extra": {"a": [1, 2.5]}},
        )
        sent = upstream.chat_requests[-1].json
        assert sent["top_k"] == 3
        assert sent["extra"] == {"a": [1, 2.5]}
        assert sent["seed"] == 7
        assert sent["model"] == MODEL


def test_content_parts_and_unknown_message_fields_pass_through(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
        },
    ]
    first = [
        {"role": "system", "content": "Be brief.", "x_cache": {"type": "ephemeral"}},
        {"role": "user", "content": parts, "name": "ada", "x_vendor": {"k": [1, "ü"]}},
    ]
    assert proxy.chat(token, model=MODEL, messages=first).status_code == 200
    assert last_messages(upstream) == first

    upstream.enqueue(Scenario(content="A cat."))
    second = [
        {"role": "system", "content": "Be brief.", "x_cache": {"type": "ephemeral"}},
        {"role": "user", "content": [{"type": "text", "text": "Sure?"}], "x_vendor": 2},
    ]
    assert proxy.chat(token, model=MODEL, messages=second).status_code == 200
    forwarded = last_messages(upstream)
    # the request's own messages are forwarded as sent, around the injected history
    assert forwarded[0] == second[0]
    assert forwarded[-1] == second[1]
    history = forwarded[1:-1]
    assert [m["role"] for m in history] == ["user", "assistant"]
    # Stored (and so re-injected) with the inline image as a placeholder, never its payload.
    assert history[0]["content"][0] == parts[0]
    assert history[0]["content"][1]["type"] == "text"
    assert "image" in history[0]["content"][1]["text"]
    assert "iVBORw0KGgo" not in str(history)


def test_forwarded_and_withheld_request_headers(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    sent_headers = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "congo=t61rcWkgMzE",
        "OpenAI-Organization": "org-abc",
        "OpenAI-Project": "proj_xyz",
        "Cookie": "session=very-private",
        "X-Random": "nope",
        "X-Custom-Trace": "not-allowlisted-here",
    }
    for stream in (False, True):
        body = {"model": MODEL, "messages": [user("hi")]}
        if stream:
            stream_raw(proxy, token, body, sent_headers)
        else:
            assert proxy.chat(token, sent_headers, **body).status_code == 200
        got = upstream.chat_requests[-1].headers
        assert got["traceparent"] == sent_headers["traceparent"]
        assert got["tracestate"] == sent_headers["tracestate"]
        assert got["openai-organization"] == "org-abc"
        assert got["openai-project"] == "proj_xyz"
        assert got["authorization"] == f"Bearer {UPSTREAM_KEY}"
        for withheld in ("cookie", "x-random", "x-custom-trace"):
            assert withheld not in got
        assert token not in json.dumps(got)


def test_sdk_organization_and_project_reach_the_upstream(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token, organization="org-sdk", project="proj-sdk")
    client.chat.completions.create(model=MODEL, messages=[user("hi")])
    got = upstream.chat_requests[-1].headers
    assert (got["openai-organization"], got["openai-project"]) == ("org-sdk", "proj-sdk")


@pytest.fixture
def allowlist_proxy(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    server, proxy = start_proxy(
        tmp_path / "allow",
        upstream_server[1],
        forward_headers="X-Custom-Trace, authorization , cookie,connection",
    )
    try:
        yield proxy
    finally:
        server.stop()


def test_allowlisted_headers_are_forwarded_but_never_secrets(
    allowlist_proxy: Proxy, upstream: FakeUpstream
) -> None:
    proxy = allowlist_proxy
    _, token = proxy.create_token()
    _, keyless = proxy.create_token(llm_api_key=None)
    headers = {"X-Custom-Trace": "trace-123", "X-Random": "nope", "Cookie": "a=b"}
    assert proxy.chat(token, headers, model=MODEL, messages=[user("hi")]).status_code == 200
    got = upstream.chat_requests[-1].headers
    assert got["x-custom-trace"] == "trace-123"
    assert "x-random" not in got
    # even when an operator names them, the client's credentials are never forwarded
    assert "cookie" not in got
    assert got["authorization"] == f"Bearer {UPSTREAM_KEY}"

    assert proxy.chat(keyless, headers, model=MODEL, messages=[user("hi")]).status_code == 200
    got = upstream.chat_requests[-1].headers
    assert got["x-custom-trace"] == "trace-123"
    assert "authorization" not in got
    assert "cookie" not in got


def test_response_headers_non_stream(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="first reply", headers={"x-upstream-thing": "42"}))
    first = proxy.chat(token, model=MODEL, messages=[user("hi")])
    assert first.status_code == 200
    assert first.headers["x-upstream-thing"] == "42"
    assert first.headers["content-type"] == "application/json"
    assert len(first.headers["x-request-id"]) == 8
    assert first.headers["x-upstream-request-id"].startswith("req_fake_")
    assert float(first.headers["x-memorybridge-overhead-ms"]) >= 0
    assert injected_counts(first)["history"] == 0
    assert "x-accel-buffering" not in first.headers
    assert int(first.headers["content-length"]) == len(first.content)

    second = proxy.chat(token, model=MODEL, messages=[user("again")])
    assert injected_counts(second)["history"] == 2
    assert injected(upstream, [user("again")]) == [user("hi"), assistant("first reply")]
    assert second.headers["x-request-id"] != first.headers["x-request-id"]


def test_response_headers_stream(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    proxy.chat(token, model=MODEL, messages=[user("warm up")])
    upstream.enqueue(Scenario(content="streamed", headers={"x-upstream-thing": "s"}))
    response, _ = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["x-upstream-thing"] == "s"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers.get_list("x-request-id") == [response.headers["x-request-id"]]
    assert len(response.headers["x-request-id"]) == 8
    assert float(response.headers["x-memorybridge-overhead-ms"]) >= 0
    assert injected_counts(response)["history"] == 2


def test_error_responses_carry_request_id_and_upstream_headers(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(status=429, headers={"retry-after": "7", "x-upstream-thing": "e"}))
    limited = proxy.chat(token, model=MODEL, messages=[user("hi")])
    assert limited.status_code == 429
    assert (limited.headers["retry-after"], limited.headers["x-upstream-thing"]) == ("7", "e")
    assert len(limited.headers["x-request-id"]) == 8

    invalid = proxy.chat(token, model=MODEL, messages=[])
    assert invalid.status_code == 422
    assert invalid.json()["error"]["request_id"] == invalid.headers["x-request-id"]


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_llm_base_url_with_or_without_v1(proxy: Proxy, upstream: FakeUpstream, suffix: str) -> None:
    _, token = proxy.create_token(llm_base_url=proxy.upstream_url + suffix)
    reply = proxy.client(token).chat.completions.create(model=MODEL, messages=[user("hi")])
    assert reply.choices[0].message.content
    assert upstream.requests[-1].path == "/v1/chat/completions"
    assert [m.id for m in proxy.client(token).models.list()] == upstream.models
    assert upstream.requests[-1].path == "/v1/models"


def test_models_and_embeddings_pass_through(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    models = client.models.list()
    assert [m.id for m in models] == upstream.models
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"

    result = client.embeddings.create(
        model="text-embedding-3-small", input=["alpha", "beta"], dimensions=4
    )
    recorded = upstream.requests[-1]
    assert (recorded.method, recorded.path) == ("POST", "/v1/embeddings")
    assert recorded.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert recorded.json["input"] == ["alpha", "beta"]
    assert recorded.json["dimensions"] == 4
    assert [len(d.embedding) for d in result.data] == [4, 4]
    for r in upstream.requests:
        assert token not in json.dumps(r.headers)

    # the upstream's own errors (and bodies) pass through too
    raw = httpx.post(
        f"{proxy.url}/v1/embeddings", json={"model": "e"}, headers=auth(token), timeout=30
    )
    assert raw.status_code == 400
    assert raw.json()["error"]["message"] == "'input' is required"
    assert len(raw.headers["x-request-id"]) == 8
    # nothing was stored as chat history
    assert upstream.chat_requests == []
