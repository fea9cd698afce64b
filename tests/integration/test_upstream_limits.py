"""Upstream answers larger than `max_upstream_body_bytes`: relayed to the client unchanged
(streamed through, never held whole), not parsed for storage, one warning without secrets."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import assistant, injected, stream_raw, user
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy

MODEL = "gpt-4o-mini"
LIMIT = 4096
BIG = "many words " * 1000  # ~11 KB of content: well over LIMIT in any encoding
SMALL = "a short reply"


@pytest.fixture
def small(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    """A proxy whose upstream answers may be at most LIMIT bytes to be stored."""
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], max_upstream_body_bytes=LIMIT
    )
    try:
        yield proxy
    finally:
        server.stop()


def history(proxy: Proxy, upstream: FakeUpstream, token: str) -> list[dict[str, str]]:
    """The stored turns of the session, as injected in front of a new request."""
    upstream.enqueue(Scenario(content="ok"))
    assert proxy.chat(token, model=MODEL, messages=[user("next")]).status_code == 200
    return injected(upstream, [user("next")])


def limit_warnings(logs: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in logs.records
        if r.name.startswith("memory_bridge")
        and r.levelno == logging.WARNING
        and "not stored" in r.getMessage()
    ]


@pytest.mark.parametrize(
    "shape",
    [{}, {"chunked_json": True, "chunk_size": 1000}, {"chunked_json": True}, {"gzip_json": True}],
    ids=["content-length", "chunked", "chunked-one-piece", "gzip"],
)
def test_an_oversized_json_reply_is_relayed_unchanged_and_not_stored(
    small: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture, shape: dict[str, object]
) -> None:
    _, token = small.create_token()
    upstream.enqueue(Scenario(content=BIG, id="chatcmpl-big", **shape))  # type: ignore[arg-type]
    reply = small.chat(token, model=MODEL, messages=[user("tell me a lot")])
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == BIG
    if upstream.sent_bytes:  # the shaped replies record their bytes: the very same ones
        assert reply.content == upstream.sent_bytes[-1]
    # Streamed through, not buffered into one body: no Content-Length of ours.
    assert "content-length" not in reply.headers
    assert reply.headers["x-upstream-request-id"].startswith("req_fake_")

    [warning] = limit_warnings(logs)
    assert str(LIMIT) in warning.getMessage()
    assert UPSTREAM_KEY not in warning.getMessage() and token not in warning.getMessage()
    assert history(small, upstream, token) == []


def test_a_reply_within_the_limit_is_stored_as_before(
    small: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    _, token = small.create_token()
    upstream.enqueue(Scenario(content=SMALL, chunked_json=True, chunk_size=50))
    reply = small.chat(token, model=MODEL, messages=[user("hi")])
    assert reply.json()["choices"][0]["message"]["content"] == SMALL
    assert int(reply.headers["content-length"]) == len(reply.content)
    assert limit_warnings(logs) == []
    assert history(small, upstream, token) == [user("hi"), assistant(SMALL)]


def test_the_sdk_reads_an_oversized_reply(small: Proxy, upstream: FakeUpstream) -> None:
    _, token = small.create_token()
    upstream.enqueue(Scenario(content=BIG, chunked_json=True, chunk_size=777))
    completion = small.client(token).chat.completions.create(model=MODEL, messages=[user("hi")])
    assert completion.choices[0].message.content == BIG


def test_an_oversized_body_breaking_off_aborts_the_response(
    small: Proxy, upstream: FakeUpstream
) -> None:
    _, token = small.create_token()
    upstream.enqueue(
        Scenario(content=BIG, chunked_json=True, chunk_size=1000, disconnect_after_chunks=8)
    )
    # Past the limit our response has started: it cannot become a 502 any more, so it is cut
    # off, and the client sees an incomplete body rather than a short one that looks whole.
    with pytest.raises(httpx.RemoteProtocolError):
        small.chat(token, model=MODEL, messages=[user("hi")])
    upstream.enqueue(
        Scenario(content=BIG, chunked_json=True, chunk_size=1000, disconnect_after_chunks=8)
    )
    client = small.client(token)
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model=MODEL, messages=[user("hi")])
    assert history(small, upstream, token) == []


def test_a_body_breaking_off_within_the_limit_is_our_502(
    small: Proxy, upstream: FakeUpstream
) -> None:
    _, token = small.create_token()
    upstream.enqueue(
        Scenario(content=SMALL, chunked_json=True, chunk_size=20, disconnect_after_chunks=2)
    )
    reply = small.chat(token, model=MODEL, messages=[user("hi")])
    assert reply.status_code == 502
    assert reply.json()["error"]["type"] == "upstream_unavailable"
    assert history(small, upstream, token) == []


def test_an_oversized_stream_is_relayed_exactly_and_not_stored(
    small: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    _, token = small.create_token()
    upstream.enqueue(Scenario(content=BIG, chunk_size=500))
    _, raw = stream_raw(small, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == upstream.sent_bytes[-1]
    assert len(raw) > LIMIT
    assert len(limit_warnings(logs)) == 1
    assert history(small, upstream, token) == []


def test_a_stream_within_the_limit_is_stored(small: Proxy, upstream: FakeUpstream) -> None:
    _, token = small.create_token()
    upstream.enqueue(Scenario(content=SMALL, chunk_size=5))
    _, raw = stream_raw(small, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == upstream.sent_bytes[-1]
    assert history(small, upstream, token) == [user("hi"), assistant(SMALL)]


@pytest.mark.parametrize("stream", [False, True])
def test_oversized_error_bodies_pass_through_unchanged(
    small: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    _, token = small.create_token()
    body = json.dumps({"error": {"message": "x" * (2 * LIMIT), "type": "server_error"}}).encode()
    upstream.enqueue(Scenario(status=503, error_body=body))
    reply = small.chat(token, model=MODEL, messages=[user("hi")], stream=stream)
    assert reply.status_code == 503
    assert reply.content == body


@pytest.mark.parametrize("shape", [{}, {"chunked_json": True, "chunk_size": 999}])
def test_a_passthrough_token_relays_an_oversized_reply(
    small: Proxy, upstream: FakeUpstream, shape: dict[str, object]
) -> None:
    _, token = small.create_token(memory={"mode": "off"})
    upstream.enqueue(Scenario(content=BIG, **shape))  # type: ignore[arg-type]
    reply = small.chat(token, model=MODEL, messages=[user("hi")], stream=False)
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == BIG
    assert "content-length" not in reply.headers
