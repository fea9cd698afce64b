"""The test infrastructure itself: LoopbackServer + FakeUpstream, driven by httpx and the
official openai SDK directly (no proxy in between)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.fakes.upstream import DEFAULT_REPLY, FakeUpstream, Scenario, ToolCall, fake_embedding
from tests.support.loopback import LoopbackServer

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def fake_server() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with LoopbackServer(fake.app) as server:
        yield fake, server.url


@pytest.fixture
def fake(fake_server: tuple[FakeUpstream, str]) -> FakeUpstream:
    fake_server[0].reset()
    return fake_server[0]


@pytest.fixture
def base_url(fake_server: tuple[FakeUpstream, str]) -> str:
    return fake_server[1]


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-test", max_retries=0) as c:
        yield c


def _stream_body(base_url: str, payload: dict[str, Any]) -> bytes:
    with httpx.stream("POST", base_url + CHAT, json=payload) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return b"".join(response.iter_raw())


# ---- LoopbackServer ------------------------------------------------------------------


def test_loopback_runs_lifespan_and_restarts_cleanly() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    async def ping(request: Request) -> PlainTextResponse:
        return PlainTextResponse("pong")

    app = Starlette(routes=[Route("/ping", ping)], lifespan=lifespan)
    server = LoopbackServer(app)
    urls = set()
    for _ in range(5):
        with server:
            urls.add(server.url)
            assert httpx.get(server.url + "/ping").text == "pong"
        assert not server.running
    assert events == ["startup", "shutdown"] * 5
    assert all(url.startswith("http://127.0.0.1:") for url in urls)


def test_loopback_start_raises_when_lifespan_fails() -> None:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("boom")
        yield

    with pytest.raises(RuntimeError, match="failed to start"):
        LoopbackServer(Starlette(lifespan=lifespan), log_level="critical").start()


# ---- chat completions ------------------------------------------------------------------


def test_non_stream_reply_parses_in_sdk(fake: FakeUpstream, client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi there"}]
    )
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "gpt-4o-mini"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 2

    [recorded] = fake.requests
    assert (recorded.method, recorded.path) == ("POST", CHAT)
    assert recorded.headers["authorization"] == "Bearer sk-test"
    assert recorded.json["messages"] == [{"role": "user", "content": "hi there"}]


def test_scripted_replies_are_fifo_then_default(fake: FakeUpstream, client: openai.OpenAI) -> None:
    fake.enqueue(Scenario(content="first"), Scenario(content="second", reasoning="hmm"))
    replies = [
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        for _ in range(3)
    ]
    assert [r.choices[0].message.content for r in replies] == ["first", "second", DEFAULT_REPLY]
    assert replies[1].choices[0].message.model_extra == {"reasoning_content": "hmm"}


def test_stream_with_tool_calls_reassembles_in_sdk(
    fake: FakeUpstream, client: openai.OpenAI
) -> None:
    fake.enqueue(
        Scenario(
            tool_calls=[
                ToolCall("get_weather", {"city": "Zürich", "unit": "celsius"}),
                ToolCall("get_time", '{"tz":"Europe/Zurich"}', id="call_xyz"),
            ]
        )
    )
    with client.chat.completions.stream(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "weather?"}],
        stream_options={"include_usage": True},
    ) as stream:
        final = stream.get_final_completion()

    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None
    assert [(c.id, c.function.name) for c in calls] == [
        ("call_fake0", "get_weather"),
        ("call_xyz", "get_time"),
    ]
    assert json.loads(calls[0].function.arguments) == {"city": "Zürich", "unit": "celsius"}
    assert calls[1].function.arguments == '{"tz":"Europe/Zurich"}'
    assert final.usage is not None
    assert final.usage.completion_tokens > 0

    # the wire format: arguments arrive in several fragments, usage-only chunk at the end
    events = fake.sent_bytes[-1].decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] > 0
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    fragments = [
        tc["function"]["arguments"]
        for c in chunks[:-1]
        for tc in c["choices"][0]["delta"].get("tool_calls", [])
        if tc["index"] == 0
    ]
    assert len(fragments) > 2


def test_stream_text_with_reasoning_in_sdk(fake: FakeUpstream, client: openai.OpenAI) -> None:
    fake.enqueue(Scenario(content="The answer is 42.", reasoning="Let me think."))
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "q"}], stream=True
    )
    content, reasoning = [], []
    for chunk in stream:
        delta = chunk.choices[0].delta
        content.append(delta.content or "")
        reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
    assert "".join(content) == "The answer is 42."
    assert "".join(reasoning) == "Let me think."
    assert sum(1 for c in content if c) > 1  # several deltas


def test_chunked_stream_is_byte_identical(fake: FakeUpstream, base_url: str) -> None:
    text = "Grüße aus Zürich ✓ — 日本語のテキスト"
    payload = {"model": "m", "stream": True, "messages": []}
    fake.enqueue(Scenario(content=text, id="chatcmpl-same"))
    whole = _stream_body(base_url, payload)
    fake.enqueue(Scenario(content=text, id="chatcmpl-same", chunk_size=3))
    split = _stream_body(base_url, payload)

    assert split == whole == fake.sent_bytes[0] == fake.sent_bytes[1]
    assert whole.endswith(b"data: [DONE]\n\n")
    assert text.encode() not in whole  # sanity: content was spread over several deltas


def test_raw_sse_and_omit_done(fake: FakeUpstream, base_url: str) -> None:
    raw = b'data: {"weird": true}\n\n: comment\n\ndata: [DONE]\n\n'
    fake.enqueue(Scenario(raw_sse=raw, chunk_size=5), Scenario(omit_done=True))
    assert _stream_body(base_url, {"model": "m", "stream": True}) == raw
    assert b"[DONE]" not in _stream_body(base_url, {"model": "m", "stream": True})


@pytest.mark.parametrize("stream", [False, True])
def test_error_status_surfaces_in_sdk(
    fake: FakeUpstream, client: openai.OpenAI, stream: bool
) -> None:
    fake.enqueue(
        Scenario(
            status=429,
            error_body={"error": {"message": "slow down", "type": "rate_limit", "code": None}},
        )
    )
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=stream
        )
    assert info.value.status_code == 429
    assert "slow down" in info.value.message

    fake.enqueue(Scenario(status=503))
    with pytest.raises(openai.InternalServerError) as info5:
        client.chat.completions.create(model="m", messages=[], stream=stream)
    assert info5.value.status_code == 503


def test_disconnect_after_chunks_breaks_the_stream(
    fake: FakeUpstream, client: openai.OpenAI, base_url: str
) -> None:
    for _ in range(10):  # it must be reliable, not a timing accident
        fake.enqueue(Scenario(content="one two three four", disconnect_after_chunks=2))
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", base_url + CHAT, json={"model": "m", "stream": True}) as r,
        ):
            r.read()
        assert fake.sent_bytes[-1].count(b"data: ") == 2

    fake.enqueue(Scenario(content="one two three four", disconnect_after_chunks=3))
    seen: list[str] = []
    with pytest.raises((httpx.TransportError, openai.APIConnectionError)):  # noqa: PT012
        for chunk in client.chat.completions.create(model="m", messages=[], stream=True):
            seen.append(chunk.choices[0].delta.content or "")
    assert "".join(seen) == "one two "

    # and with pieces cut mid-line the break is still an error, not a clean EOF
    fake.enqueue(Scenario(disconnect_after_chunks=7, chunk_size=10))
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", base_url + CHAT, json={"model": "m", "stream": True}) as r,
    ):
        r.read()
    assert len(fake.sent_bytes[-1]) == 70


def test_cancelled_counts_abandoned_delayed_request(fake: FakeUpstream, base_url: str) -> None:
    fake.enqueue(Scenario(delay=10))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base_url + CHAT, json={"model": "m"}, timeout=0.3)
    assert fake.wait_cancelled(1, timeout=3)
    assert fake.cancelled == 1


def test_cancelled_counts_abandoned_stream(fake: FakeUpstream, base_url: str) -> None:
    fake.enqueue(Scenario(content="a b c d e f", chunk_delay=0.5))
    with httpx.stream("POST", base_url + CHAT, json={"model": "m", "stream": True}) as r:
        first = next(r.iter_raw())
    assert first.startswith(b"data: ")
    assert fake.wait_cancelled(1, timeout=3)

    # a stream that is read to the end is not counted
    _stream_body(base_url, {"model": "m", "stream": True})
    assert fake.cancelled == 1


def test_embeddings_honour_dimensions(fake: FakeUpstream, client: openai.OpenAI) -> None:
    result = client.embeddings.create(
        model="text-embedding-3-small", input=["alpha", "beta"], dimensions=16
    )
    vectors = [d.embedding for d in result.data]
    assert [len(v) for v in vectors] == [16, 16]
    assert vectors[0] == fake_embedding("alpha", 16)
    assert vectors[0] != vectors[1]
    assert fake.requests[-1].json["dimensions"] == 16

    default = client.embeddings.create(model="text-embedding-3-small", input="alpha")
    assert default.data[0].embedding == fake_embedding("alpha", 8)

    as_floats = httpx.post(
        f"{client.base_url}embeddings",
        json={"model": "e", "input": "alpha", "encoding_format": "float"},
    ).json()
    assert as_floats["data"][0]["embedding"] == fake_embedding("alpha", 8)


def test_models_and_unknown_paths_are_recorded(fake: FakeUpstream, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == fake.models
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="m", prompt="legacy")
    assert [r.path for r in fake.requests] == ["/v1/models", "/v1/completions"]
