"""The storage layer on SQLite and on PostgreSQL: the same code, the same outcomes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_bridge.messages import Message
from memory_bridge.storage.db import create_engine, create_schema, session_factory
from memory_bridge.storage.events import EventLog
from memory_bridge.storage.sessions import SessionRepository
from memory_bridge.storage.tokens import TokenStore
from memory_bridge.tenancy.config import validate_config
from memory_bridge.turn import Scope
from tests.support.databases import fresh_postgres_url, needs_postgres


@pytest.fixture(
    params=[
        pytest.param("sqlite"),
        pytest.param("postgres", marks=[needs_postgres, pytest.mark.postgres]),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    else:
        with fresh_postgres_url() as url:
            yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await create_schema(engine)
    await create_schema(engine)  # idempotent: init may run again
    yield engine
    await engine.dispose()


def _config(name: str = "t") -> object:
    return validate_config({"name": name, "llm_base_url": "http://127.0.0.1:9/v1"})


async def test_tokens_round_trip_and_secrets_are_hashed(engine: AsyncEngine) -> None:
    store = TokenStore(session_factory(engine), cache_ttl=60)
    assert not await store.has_admin()
    admin = await store.create_admin()
    assert await store.has_admin()
    record, secret = await store.create(_config("agent"))  # type: ignore[arg-type]
    principal = await store.authenticate(secret)
    assert principal is not None and principal.token_id == record.id and not principal.is_admin
    admin_principal = await store.authenticate(admin)
    assert admin_principal is not None and admin_principal.is_admin
    assert await store.authenticate(secret + "x") is None

    async with engine.connect() as conn:
        stored = (await conn.exec_driver_sql("select secret_hash, config from tokens")).all()
    dumped = repr(stored)
    assert secret not in dumped and admin not in dumped

    rotated = await store.rotate(record.id)
    assert rotated is not None
    assert await store.authenticate(secret) is None  # the cache was invalidated at once
    assert (await store.authenticate(rotated)) is not None
    assert [r.id for r in await store.list()] == [record.id]
    assert await store.delete(record.id)
    assert await store.authenticate(rotated) is None
    assert not await store.delete(record.id)
    again, _ = await store.create(_config())  # type: ignore[arg-type]
    assert again.id > record.id  # ids are never reused: they name memory namespaces


async def test_session_history_is_scoped_and_ordered(engine: AsyncEngine) -> None:
    repo = SessionRepository(session_factory(engine))
    a = Scope(token_id=1, user="", session="default")
    b = Scope(token_id=1, user="bob", session="default")
    c = Scope(token_id=2, user="", session="default")
    msgs = [
        Message(role="user", content=f"m{i}")
        if i % 2 == 0
        else Message(role="assistant", content=f"m{i}")
        for i in range(6)
    ]
    await repo.append(a, msgs)
    await repo.append(b, [Message(role="user", content="bob's")])
    await repo.append(c, [Message(role="user", content="other token")])
    recent = await repo.recent(a, 4)
    assert [m.content for m in recent] == ["m2", "m3", "m4", "m5"]
    assert [m.content for m in await repo.recent(b, 10)] == ["bob's"]
    tool_call = Message(
        role="assistant",
        content=None,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    )
    await repo.append(a, [tool_call, Message(role="tool", content="42", tool_call_id="c1")])
    tail = await repo.recent(a, 2)
    assert tail[0].tool_calls == tool_call.tool_calls and tail[1].tool_call_id == "c1"
    await repo.purge(1)
    assert await repo.recent(a, 10) == [] and await repo.recent(b, 10) == []
    assert len(await repo.recent(c, 10)) == 1


async def test_events_filter_and_purge(engine: AsyncEngine) -> None:
    log = EventLog(session_factory(engine))
    s1 = Scope(token_id=5, session="s1")
    s2 = Scope(token_id=5, session="s2")
    await log.record(s1, "memory_gateway_recall_failed", "abcd1234", {"category": "timeout"})
    await log.record(s2, "memory_gateway_add_succeeded", "abcd1235", {"message_count": 2})
    assert [e.type for e in await log.list(5)] == [
        "memory_gateway_recall_failed",
        "memory_gateway_add_succeeded",
    ]
    only = await log.list(5, session="s2")
    assert len(only) == 1 and only[0].data == {"message_count": 2} and only[0].session == "s2"
    assert len(await log.list(5, type_="memory_gateway_recall_failed")) == 1
    assert await log.list(6) == []
    await log.purge(5)
    assert await log.list(5) == []


@needs_postgres
@pytest.mark.postgres
def test_the_whole_proxy_runs_on_postgresql(tmp_path: Path, upstream_server) -> None:  # type: ignore[no-untyped-def]
    from tests.support.proxy import start_proxy

    fake, upstream_url = upstream_server
    fake.reset()
    with fresh_postgres_url() as url:
        server, proxy = start_proxy(tmp_path / "data", upstream_url, database_url=url)
        try:
            _, token = proxy.create_token()
            client = proxy.client(token)
            for text in ("first", "second"):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": text}]
                )
            contents = [m["content"] for m in fake.chat_requests[-1].json["messages"]]
            assert contents == ["first", "Hello from upstream", "second"]
        finally:
            server.stop()
