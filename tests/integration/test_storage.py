"""The storage layer on SQLite and on PostgreSQL: the same code, the same outcomes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, insert, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Scope
from memory_bridge.events.curated import CuratedRepository, CuratedSnapshot
from memory_bridge.storage.audit import AuditLog
from memory_bridge.storage.db import Database, create_engine, create_schema, session_factory
from memory_bridge.storage.sessions import SessionRepository, stored_form
from memory_bridge.storage.tables import curated, messages
from memory_bridge.storage.tokens import TokenStore
from memory_bridge.tenancy.config import validate_config
from tests.support.databases import fresh_postgres_url, needs_postgres


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await create_schema(engine)
    await create_schema(engine)  # idempotent: init may run again
    yield engine
    await engine.dispose()


@pytest.fixture
async def db(engine: AsyncEngine) -> AsyncIterator[Database]:
    database = session_factory(engine)
    yield database
    await database.close()


_HELLO = Message(role="user", content="hello")


def _config(name: str = "t") -> object:
    return validate_config({"name": name, "llm_base_url": "http://127.0.0.1:9/v1"})


async def test_tokens_round_trip_and_secrets_are_hashed(engine: AsyncEngine, db: Database) -> None:
    store = TokenStore(db, cache_ttl=60)
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


async def test_session_history_is_scoped_and_ordered(db: Database) -> None:
    repo = SessionRepository(db)
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


async def test_events_filter_and_purge(db: Database) -> None:
    log = AuditLog(db)
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


# -- the hot path: one call per unit of work, the curated cache, stored identities -----------


async def test_units_of_work_run_on_one_dedicated_thread_on_sqlite(db: Database) -> None:
    def where(_: Connection) -> str:
        return threading.current_thread().name

    names = await asyncio.gather(*(db.run(where) for _ in range(5)), db.write(where))
    if db.engine.dialect.name == "sqlite":
        assert len(set(names)) == 1 and names[0].startswith("memory-bridge-sqlite")
    else:
        assert not any(n.startswith("memory-bridge-sqlite") for n in names)


async def test_a_failed_write_leaves_nothing_and_the_next_unit_works(db: Database) -> None:
    repo = SessionRepository(db)
    scope = Scope(token_id=1, session="s")
    row = {"token_id": 1, "user_id": "", "session_id": "s", "role": "user", "body": "{}"}

    def half_done(conn: Connection) -> None:
        conn.execute(insert(messages), [row])
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await db.write(half_done)
    assert await repo.recent(scope, 10) == []
    await repo.append(scope, [Message(role="user", content="kept")])
    assert [m.content for m in await repo.recent(scope, 10)] == ["kept"]


async def test_a_write_without_statements_leaves_no_transaction_open(db: Database) -> None:
    def nothing(_: Connection) -> None:
        return None

    def fails_first(_: Connection) -> None:
        raise RuntimeError("before any statement")

    await db.write(nothing)
    with pytest.raises(RuntimeError):
        await db.write(fails_first)
    await asyncio.wait_for(CuratedRepository(db).put(1, "memory", "", "admin write"), 10)
    await asyncio.wait_for(SessionRepository(db).append(Scope(token_id=1), [_HELLO]), 10)
    assert len(await SessionRepository(db).recent(Scope(token_id=1), 5)) == 1


async def test_sql_parameters_never_reach_an_error_string(db: Database) -> None:
    secret = "sk-live-parameter-" + "x" * 24
    await CuratedRepository(db).put(1, "memory", "", secret)
    duplicate = insert(curated).values(token_id=1, kind="memory", user_id="", body=secret)

    def write_duplicate(conn: Connection) -> None:
        conn.execute(duplicate)

    with pytest.raises(IntegrityError) as hot:
        await db.write(write_duplicate)
    with pytest.raises(IntegrityError) as admin:
        async with db.begin() as s:
            await s.execute(duplicate)
    for exc in (hot.value, admin.value):
        assert secret not in str(exc) and secret not in repr(exc)


async def test_concurrent_appends_keep_order_and_lose_nothing(db: Database) -> None:
    repo = SessionRepository(db)
    scope = Scope(token_id=1, session="busy")
    turns = 60

    async def turn(i: int) -> None:
        await repo.append(
            scope,
            [Message(role="user", content=f"q{i}"), Message(role="assistant", content=f"a{i}")],
        )

    async def reader() -> None:
        for _ in range(20):
            await repo.window(scope, 5)

    await asyncio.gather(*(turn(i) for i in range(turns)), reader(), reader())
    stored = [m.content for m in await repo.recent(scope, 1000)]
    expected = [c for i in range(turns) for c in (f"q{i}", f"a{i}")]
    assert sorted(stored, key=str) == sorted(expected)
    for i in range(turns):  # a turn's messages stay in their order
        assert stored.index(f"q{i}") < stored.index(f"a{i}")
    if db.engine.dialect.name == "sqlite":  # one writer at a time, first come first served
        assert stored == expected


async def test_a_started_write_completes_even_if_its_caller_is_cancelled(db: Database) -> None:
    repo = SessionRepository(db)
    scope = Scope(token_id=1, session="gone")
    task = asyncio.create_task(repo.append(scope, [Message(role="user", content="last turn")]))
    await asyncio.sleep(0)  # the write is under way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if await repo.recent(scope, 10):
            break
        await asyncio.sleep(0.02)
    assert [m.content for m in await repo.recent(scope, 10)] == ["last turn"]
    await repo.append(scope, [Message(role="assistant", content="and after")])  # turn released
    assert len(await repo.recent(scope, 10)) == 2


async def _edit_behind_its_back(db: Database, token_id: int, body: str) -> None:
    """What an edit through another process looks like to this one."""
    async with db.begin() as s:
        await s.execute(
            update(curated)
            .where(curated.c.token_id == token_id, curated.c.kind == "memory")
            .values(body=body)
        )


async def test_the_curated_snapshot_is_cached_and_dropped_on_every_edit_here(
    db: Database,
) -> None:
    repo = CuratedRepository(db, cache_ttl=60)
    await repo.put(1, "memory", "", "v1")
    await repo.put(2, "memory", "", "other")
    assert await repo.snapshot(1, "") == CuratedSnapshot(memory="v1", user="")
    assert (await repo.snapshot(2, "")).memory == "other"
    await _edit_behind_its_back(db, 1, "v2")
    await _edit_behind_its_back(db, 2, "other v2")
    assert (await repo.snapshot(1, "")).memory == "v1"  # served from the cache

    await repo.put(1, "user", "bob", "about bob")  # PUT here: the token's snapshots go
    assert await repo.snapshot(1, "bob") == CuratedSnapshot(memory="v2", user="about bob")
    assert await repo.snapshot(1, "") == CuratedSnapshot(memory="v2", user="")
    assert (await repo.snapshot(2, "")).memory == "other"  # other tokens keep theirs

    await repo.purge(1)
    assert await repo.snapshot(1, "bob") == CuratedSnapshot(memory="", user="")

    repo.forget(2)  # what a token's deletion or update does
    assert (await repo.snapshot(2, "")).memory == "other v2"


async def test_the_curated_cache_expires_and_can_be_off(db: Database) -> None:
    short, off = CuratedRepository(db, cache_ttl=0.2), CuratedRepository(db)
    await short.put(1, "memory", "", "v1")
    assert (await short.snapshot(1, "")).memory == "v1"
    assert (await off.snapshot(1, "")).memory == "v1"
    await _edit_behind_its_back(db, 1, "v2")
    assert (await off.snapshot(1, "")).memory == "v2"
    assert (await short.snapshot(1, "")).memory == "v1"
    await asyncio.sleep(0.25)
    assert (await short.snapshot(1, "")).memory == "v2"


async def test_a_snapshot_read_across_an_edit_is_not_cached(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = CuratedRepository(db, cache_ttl=60)
    await repo.put(1, "memory", "", "old")
    read = db.run

    async def read_then_edit(work: Any) -> Any:
        result = await read(work)
        await repo.put(1, "memory", "", "new")  # lands while the snapshot is in flight
        return result

    monkeypatch.setattr(db, "run", read_then_edit)
    assert (await repo.snapshot(1, "")).memory == "old"  # taken before the edit: fine
    monkeypatch.undo()
    assert (await repo.snapshot(1, "")).memory == "new"  # but not kept


_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
VARIETY = [
    Message(role="user", content="plain"),
    Message.model_validate({"role": "user", "content": "vendor", "x_vendor": {"a": 1}}),
    Message(role="user", content=[{"type": "text", "text": "parts"}, {"type": "image_url"}]),
    Message(role="assistant", content="", name="bot", tool_calls=[_CALL]),
    Message(role="tool", content="42", tool_call_id="c1"),
    Message(role="assistant", content='ünïcødé ✓ 😀 "quoted" \\ back'),
    Message(role="assistant", content=None, tool_calls=[_CALL, {**_CALL, "id": "c2"}]),
]


async def test_stored_messages_and_identities_are_what_was_appended(db: Database) -> None:
    repo = SessionRepository(db)
    scope = Scope(token_id=1, session="s")
    await repo.append(scope, VARIETY)
    window = await repo.window(scope, 20)
    as_before = [Message.model_validate(json.loads(json.dumps(stored_form(m)))) for m in VARIETY]
    assert [s.message for s in window] == as_before == await repo.recent(scope, 20)
    assert [s.message.to_dict() for s in window] == [m.to_dict() for m in as_before]
    identities = [m.identity() for m in VARIETY]
    assert [s.identity for s in window] == identities
    assert [s.identity for s in await repo.window(scope, 20)] == identities  # memoised
    assert [s.identity for s in await SessionRepository(db).window(scope, 20)] == identities


async def test_remembered_identities_follow_a_purge_made_elsewhere(db: Database) -> None:
    """SQLite hands a purged row's id out again: a remembered digest must not outlive it."""
    repo, elsewhere = SessionRepository(db), SessionRepository(db)
    scope = Scope(token_id=1, session="s")
    await repo.append(scope, [Message(role="user", content="before")])
    assert [s.message.content for s in await repo.window(scope, 5)] == ["before"]
    await elsewhere.purge(1)
    after = Message(role="user", content="after")
    await repo.append(scope, [after])
    window = await repo.window(scope, 5)
    assert [s.message for s in window] == [after]
    assert [s.identity for s in window] == [after.identity()]


async def _scenario(url: str) -> list[Any]:
    engine = create_engine(url)
    await create_schema(engine)
    db = session_factory(engine)
    try:
        history, docs = SessionRepository(db), CuratedRepository(db, cache_ttl=60)
        tokens = TokenStore(db, cache_ttl=60)
        record, secret = await tokens.create(_config("same"))  # type: ignore[arg-type]
        principal = await tokens.authenticate(secret)
        scope = Scope(token_id=record.id, user="u", session="s")
        for m in VARIETY:
            await history.append(scope, [m])
        await docs.put(record.id, "memory", "", "mem")
        await docs.put(record.id, "user", "u", "you")
        window = await history.window(scope, 4)
        return [
            principal is not None and principal.token_id,
            await tokens.authenticate(secret + "x"),
            [(s.message, s.identity) for s in window],
            await docs.snapshot(record.id, "u"),
            await docs.snapshot(record.id, "v"),
        ]
    finally:
        await db.close()
        await engine.dispose()


@needs_postgres
@pytest.mark.postgres
def test_sqlite_and_postgresql_give_the_same_results(tmp_path: Path) -> None:
    on_sqlite = asyncio.run(_scenario(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"))
    with fresh_postgres_url() as url:
        on_postgres = asyncio.run(_scenario(url))
    assert on_sqlite == on_postgres
