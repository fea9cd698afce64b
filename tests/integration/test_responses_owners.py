"""Stored Responses belong to the token that created them, on SQLite and PostgreSQL.

Two tokens share one upstream API key, so the upstream would serve either the other's stored
responses. Through the real proxy with the openai SDK: token B gets the OpenAI-shaped 404 for
token A's response ids on every path that names one and for `previous_response_id`, and not one
of those requests reaches the upstream; A still can do all of it; an id the proxy never relayed
is nobody's; purging a token removes its records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import auth
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy
from tests.support.responses_helpers import MODEL

SESSION: dict[str, Any] = {"extra_headers": {"X-Session-Id": "s"}}


@pytest.fixture
def db_proxy(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    database_url: str,
) -> Iterator[Proxy]:
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], database_url=database_url)
    try:
        yield proxy
    finally:
        server.stop()


def _owner_rows(url: str) -> list[tuple[int, str]]:
    async def read() -> list[tuple[int, str]]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                query = text("select token_id, response_id from response_owners order by 2")
                return [(row[0], row[1]) for row in await conn.execute(query)]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def _uses(client: openai.OpenAI, rid: str) -> list[Callable[[], object]]:
    """Every call of the SDK that names a stored response (the delete last)."""
    return [
        lambda: client.responses.retrieve(rid),
        lambda: list(client.responses.retrieve(rid, stream=True)),
        lambda: client.responses.input_items.list(rid),
        lambda: client.responses.cancel(rid),
        lambda: client.responses.create(
            model=MODEL, input="go on", previous_response_id=rid, **SESSION
        ),
        lambda: client.responses.create(
            model=MODEL, input="go on", previous_response_id=rid, stream=True, **SESSION
        ),
        lambda: client.responses.input_tokens.count(model=MODEL, previous_response_id=rid),
        lambda: client.responses.delete(rid),
    ]


def test_another_tokens_response_ids_are_not_found_and_never_forwarded(
    db_proxy: Proxy, upstream: FakeUpstream, database_url: str
) -> None:
    proxy = db_proxy
    id_a, token_a = proxy.create_token()
    id_b, token_b = proxy.create_token(memory={"mode": "off"})  # passthrough: checked all the same
    a, b = proxy.client(token_a), proxy.client(token_b)
    upstream.enqueue(Scenario(content="json", id="resp_a1"))
    assert a.responses.create(model=MODEL, input="one", **SESSION).id == "resp_a1"
    upstream.enqueue(Scenario(content="streamed", id="resp_a2"))
    with a.responses.stream(model=MODEL, input="two", **SESSION) as stream:
        assert stream.get_final_response().id == "resp_a2"
    upstream.enqueue(Scenario(content="b's", id="resp_b1"))
    assert b.responses.create(model=MODEL, input="mine").id == "resp_b1"
    assert _owner_rows(database_url) == [(id_a, "resp_a1"), (id_a, "resp_a2"), (id_b, "resp_b1")]

    upstream.requests.clear()
    for rid in ("resp_a1", "resp_a2"):
        for use in _uses(b, rid):
            with pytest.raises(openai.NotFoundError) as raised:
                use()
            assert raised.value.status_code == 404
            assert raised.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        raw = httpx.get(f"{proxy.url}/v1/responses/{rid}", headers=auth(token_b))
        assert raw.status_code == 404 and "error" in raw.json()
    assert upstream.requests == []  # nothing of B's reached the upstream

    # A still can, on every path; B on its own.
    upstream.enqueue(Scenario(content="again"), Scenario(content="again, streamed"))
    for use in _uses(a, "resp_a1")[:-2]:
        use()
    with pytest.raises(openai.NotFoundError):  # the fake upstream serves no input_tokens
        _uses(a, "resp_a1")[-2]()
    assert b.responses.retrieve("resp_b1").id == "resp_b1"
    a.responses.delete("resp_a1")
    assert len(upstream.requests) == 9
    assert [r.path for r in upstream.requests][-3:] == [
        "/v1/responses/input_tokens",
        "/v1/responses/resp_b1",
        "/v1/responses/resp_a1",
    ]
    # The deleted response's record went with it; the continuations A made are A's.
    rows = _owner_rows(database_url)
    assert (id_a, "resp_a1") not in rows and (id_a, "resp_a2") in rows
    assert [row for row in rows if row[0] == id_b] == [(id_b, "resp_b1")]
    assert len([row for row in rows if row[0] == id_a]) == 3

    assert proxy.admin("DELETE", f"/tokens/{id_a}?purge=true").status_code == 204
    assert _owner_rows(database_url) == [(id_b, "resp_b1")]


def test_an_id_the_proxy_never_relayed_is_nobodys(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    # Created at the provider directly, with the same key: the proxy never saw it.
    made = httpx.post(
        f"{proxy.upstream_url}/v1/responses",
        json={"model": MODEL, "input": "direct"},
        headers={"Authorization": f"Bearer {UPSTREAM_KEY}"},
    )
    rid = made.json()["id"]
    upstream.requests.clear()
    client = proxy.client(token)
    for use in _uses(client, rid):
        with pytest.raises(openai.NotFoundError):
            use()
    # Not an id at all: refused the same way, never forwarded.
    for path in ("resp%5Fx", "resp.x", "-" * 201, "resp_x%2F..%2Fy"):
        reply = httpx.get(f"{proxy.url}/v1/responses/{path}/input_items", headers=auth(token))
        assert reply.status_code == 404, path
    assert upstream.requests == []


def test_a_previous_response_id_spelled_twice_is_refused(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token_a = proxy.create_token()
    _, token_b = proxy.create_token()
    upstream.enqueue(Scenario(content="a's", id="resp_theirs"))
    proxy.client(token_a).responses.create(model=MODEL, input="one")
    upstream.enqueue(Scenario(content="b's", id="resp_mine"))
    proxy.client(token_b).responses.create(model=MODEL, input="two")
    upstream.requests.clear()
    # The first spelling for a parser that keeps the first, the second for one that keeps the
    # last: the proxy must not check one and forward the other.
    raw = (
        b'{"model": "m", "input": "x", "previous\\u005fresponse_id": "resp_theirs",'
        b' "previous_response_id": "resp_mine"}'
    )
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        reply = httpx.post(
            f"{proxy.url}{path}",
            content=raw,
            headers=auth(token_b, **{"content-type": "application/json"}),
        )
        assert reply.status_code == 422, path
    assert upstream.requests == []


def test_a_response_not_stored_upstream_is_not_recorded(
    db_proxy: Proxy, upstream: FakeUpstream, database_url: str
) -> None:
    _, token = db_proxy.create_token()
    client = db_proxy.client(token)
    upstream.enqueue(Scenario(content="kept", id="resp_kept"))
    client.responses.create(model=MODEL, input="one", **SESSION)
    upstream.enqueue(Scenario(content="not kept", id="resp_gone"), Scenario(id="resp_gone_s"))
    client.responses.create(model=MODEL, input="two", store=False, **SESSION)
    with client.responses.stream(model=MODEL, input="three", store=False, **SESSION) as stream:
        stream.get_final_response()
    assert [rid for _, rid in _owner_rows(database_url)] == ["resp_kept"]
    upstream.requests.clear()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_gone")
    assert upstream.requests == []
