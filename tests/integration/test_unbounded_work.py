"""Work a legal request could make unbounded: how many messages it may carry (a 300,000-item
body under the byte limit is refused clearly, before anything walks or stores it), and how
many messages one turn stores (the older ones of a long turn become one marker row)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import DEFAULT_REPLY, FakeUpstream
from tests.support.chat_helpers import stored_rows
from tests.support.proxy import Proxy, start_proxy

PER_TURN = 50


@pytest.fixture
def capped(tmp_path: Path, upstream_server: tuple[FakeUpstream, str]) -> Iterator[Proxy]:
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], max_stored_messages_per_turn=PER_TURN
    )
    try:
        yield proxy
    finally:
        server.stop()


def test_a_request_of_300000_messages_is_refused_and_stores_nothing(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    messages = [{"role": "user", "content": "x"} for _ in range(300_000)]
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    assert len(raw) < proxy.settings.max_request_bytes  # legal by its size
    reply = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=120,
    )
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert "holds more than 20000 items" in message and "MAX_REQUEST_MESSAGES" in message
    assert upstream.chat_requests == []
    assert stored_rows(proxy) == []
    # The server is still itself: the next request of the token is answered and stored.
    ok = proxy.chat(token, model="m", messages=[{"role": "user", "content": "hi"}])
    assert ok.status_code == 200
    assert len(stored_rows(proxy)) == 2


def test_a_request_just_over_the_bound_is_counted_exactly(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    limit = proxy.settings.max_request_messages
    messages = [{"role": "user", "content": "x"} for _ in range(limit + 1)]
    reply = proxy.chat(token, model="m", messages=messages)
    assert reply.status_code == 400, reply.text
    assert f"holds {limit + 1} items" in reply.json()["error"]["message"]
    assert proxy.chat(token, model="m", messages=messages[:limit]).status_code == 200


def test_a_long_turn_stores_a_bounded_number_of_rows(capped: Proxy, upstream: FakeUpstream) -> None:
    _, token = capped.create_token()
    messages = []
    for n in range(500):
        messages.append({"role": "user", "content": f"question {n}"})
        messages.append({"role": "assistant", "content": f"answer {n}"})
    messages.append({"role": "user", "content": "the last question"})
    reply = capped.chat(token, model="m", messages=messages)
    assert reply.status_code == 200, reply.text
    rows = stored_rows(capped)
    assert len(rows) == PER_TURN  # 1,001 sent + the reply: 953 older ones left out
    marker = rows[0][4]["content"]
    assert "953 earlier messages of this turn were not stored" in marker, marker
    assert [r[4]["content"] for r in rows[-2:]] == ["the last question", DEFAULT_REPLY]
