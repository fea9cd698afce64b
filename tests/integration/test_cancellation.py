"""A client that disconnects cancels the upstream call at once, and its turn is not stored.

The upstream scenarios would run far longer than `wait_cancelled` waits, so a True result can
only come from the proxy abandoning the upstream request."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import auth, last_messages, user
from tests.support.proxy import Proxy

MODEL = "gpt-4o-mini"
LONG = 30.0  # seconds the upstream would take if nobody cancelled it
WAIT = 10.0  # how long the test waits for the cancellation to be seen


def _assert_nothing_stored(proxy: Proxy, upstream: FakeUpstream, token: str) -> None:
    reply = proxy.chat(token, model=MODEL, messages=[user("still there?")])
    assert reply.status_code == 200
    assert last_messages(upstream) == [user("still there?")]


@pytest.mark.parametrize("memory", ["curated", "off"])
@pytest.mark.parametrize("stream", [False, True])
def test_client_leaving_before_the_response_starts_cancels_the_upstream(
    proxy: Proxy, upstream: FakeUpstream, stream: bool, memory: str
) -> None:
    _, token = proxy.create_token(memory={"mode": memory})
    upstream.enqueue(Scenario(content="too late", delay=LONG))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": MODEL, "messages": [user("hello?")], "stream": stream},
            headers=auth(token),
            timeout=httpx.Timeout(30, read=0.3),
        )
    assert upstream.wait_cancelled(1, timeout=WAIT)
    _assert_nothing_stored(proxy, upstream, token)


def test_client_leaving_mid_stream_cancels_the_upstream(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    words = " ".join(f"w{i}" for i in range(int(LONG / 0.25)))
    upstream.enqueue(Scenario(content=words, chunk_delay=0.25))
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [user("talk")], "stream": True},
        headers=auth(token),
        timeout=30,
    ) as response:
        first = next(response.iter_raw())
    assert first.startswith(b"data: ")
    assert upstream.wait_cancelled(1, timeout=WAIT)
    _assert_nothing_stored(proxy, upstream, token)


def test_sdk_client_closing_a_stream_cancels_the_upstream(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    words = " ".join(f"w{i}" for i in range(int(LONG / 0.25)))
    upstream.enqueue(Scenario(content=words, chunk_delay=0.25))
    stream = proxy.client(token).chat.completions.create(
        model=MODEL, messages=[user("talk")], stream=True
    )
    next(iter(stream))
    stream.close()
    assert upstream.wait_cancelled(1, timeout=WAIT)
