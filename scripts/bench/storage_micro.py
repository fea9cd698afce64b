"""What the storage layer costs per chat request: before/after and against references.

    python scripts/bench/storage_micro.py [--requests 2000] [--database-url URL]

A chat request through MemoryBridge does up to three units of work on the database: the
history read (`SessionRepository.window`), the curated snapshot (`CuratedRepository.snapshot`)
and, after the reply, the history write (`SessionRepository.append`). This times, in one run
on one fresh database (a SQLite file by default), sequentially and with 16 requests at once:

- `before: async ORM`: the statements as the repositories ran them up to the one-call units
  of work: an async ORM session per unit (aiosqlite on SQLite), kept here as the yardstick;
- `now: repositories`: the real repositories, curated cache off (three units per request);
- `now: + curated cache`: the same with the snapshot cached as in the proxy (two units);
- SQLite only, references: `ref: sync-core-1-thread`, the same Core statements on a
  synchronous engine, each unit one call on a single dedicated thread, `BEGIN IMMEDIATE`;
  `ref: sqlite3-1-thread`, the same SQL through the `sqlite3` module on that thread.

A second table times history injection alone for a session with 20 stored messages: read,
parse every message and compute its identity digest (what `SessionHistory.recall` needs).

Figures are wall milliseconds per request, requests/s, and the process's CPU time (all its
threads) per request. At concurrency 16 the wall figures also show lock contention and thread
hops; on a shared machine the CPU figure is the steadier one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event, insert, select
from sqlalchemy.engine import Engine, make_url

from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Scope
from memory_bridge.events.curated import CuratedRepository, CuratedSnapshot
from memory_bridge.storage.db import Database, _sqlite_pragmas, create_engine, create_schema
from memory_bridge.storage.sessions import SessionRepository, stored_form
from memory_bridge.storage.tables import curated, messages

Request = Callable[[int], Awaitable[None]]
EXCHANGE = [
    Message(role="user", content="Say hello to the benchmark, please."),
    Message(role="assistant", content="Hello from the benchmark upstream."),
]
TOKEN = 1
LONG_SESSION = "long"


class BeforeORM:
    """The hot-path statements as the repositories ran them before: an async ORM session each."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def recent(self, scope: Scope, limit: int) -> list[Message]:
        async with self._db() as s:
            rows = (
                await s.execute(
                    select(messages.c.body)
                    .where(
                        messages.c.token_id == scope.token_id,
                        messages.c.user_id == scope.user,
                        messages.c.session_id == scope.session,
                    )
                    .order_by(messages.c.id.desc())
                    .limit(limit)
                )
            ).all()
        return [Message.model_validate(json.loads(r.body)) for r in reversed(rows)]

    async def snapshot(self, token_id: int, user: str) -> CuratedSnapshot:
        async with self._db() as s:
            rows = (
                await s.execute(
                    select(curated.c.kind, curated.c.user_id, curated.c.body).where(
                        curated.c.token_id == token_id, curated.c.user_id.in_({"", user})
                    )
                )
            ).all()
        docs = {(r.kind, r.user_id): r.body for r in rows}
        user_doc = docs.get(("user", user)) or docs.get(("user", ""), "")
        return CuratedSnapshot(memory=docs.get(("memory", ""), ""), user=user_doc)

    async def append(self, scope: Scope, items: list[Message]) -> None:
        rows = [
            {
                "token_id": scope.token_id,
                "user_id": scope.user,
                "session_id": scope.session,
                "role": m.role,
                "body": json.dumps(stored_form(m), ensure_ascii=False),
            }
            for m in items
        ]
        async with self._db.begin() as s:
            await s.execute(insert(messages), rows)


async def timed(label: str, request: Request, n: int, concurrency: int) -> str:
    await request(-1)
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await request(i)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return (
        f"{label:24s} c={concurrency:<3d} {elapsed / n * 1000:7.3f} ms/request"
        f" {n / elapsed:8.0f}/s   cpu {cpu / n * 1000:6.3f} ms/request"
    )


@contextmanager
def database(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="mb-storage-") as tmp:
        yield f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"


def _core_reference(
    path: str, rows: list[dict[str, Any]], one_thread: ThreadPoolExecutor
) -> tuple[Request, Callable[[], None]]:
    """SQLAlchemy Core on a sync engine, one thread: a request, and what closes the engine."""
    sync_engine = create_sync_engine(f"sqlite:///{path}")
    event.listen(sync_engine, "connect", _sqlite_pragmas)

    def core_read(db: Engine, session: str) -> None:
        with db.connect() as conn:
            conn.execute(
                select(messages.c.body)
                .where(
                    messages.c.token_id == TOKEN,
                    messages.c.user_id == "",
                    messages.c.session_id == session,
                )
                .order_by(messages.c.id.desc())
                .limit(20)
            ).all()
            conn.execute(
                select(curated.c.kind, curated.c.user_id, curated.c.body).where(
                    curated.c.token_id == TOKEN, curated.c.user_id.in_({""})
                )
            ).all()

    def core_write(db: Engine, session: str) -> None:
        with db.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            conn.execute(insert(messages), [{**r, "session_id": session} for r in rows])
            conn.commit()

    async def sync_core(i: int) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(one_thread, core_read, sync_engine, f"s{i}")
        await loop.run_in_executor(one_thread, core_write, sync_engine, f"s{i}")

    return sync_core, sync_engine.dispose


def _raw_reference(
    path: str, rows: list[dict[str, Any]], one_thread: ThreadPoolExecutor
) -> tuple[Request, Callable[[], None]]:
    """The sqlite3 module, one thread: a request, and what closes its connection."""
    raw = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    _sqlite_pragmas(raw, None)

    def raw_read(session: str) -> None:
        raw.execute(
            "SELECT body FROM messages WHERE token_id = 1 AND user_id = '' AND session_id = ?"
            " ORDER BY id DESC LIMIT 20",
            (session,),
        ).fetchall()
        raw.execute(
            "SELECT kind, user_id, body FROM curated WHERE token_id = 1 AND user_id IN ('')"
        ).fetchall()

    def raw_write(session: str) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(
            "INSERT INTO messages (token_id, user_id, session_id, role, body, created_at)"
            " VALUES (1, '', ?, ?, ?, CURRENT_TIMESTAMP)",
            [(session, r["role"], r["body"]) for r in rows],
        )
        raw.execute("COMMIT")

    async def raw_sqlite(i: int) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(one_thread, raw_read, f"s{i}")
        await loop.run_in_executor(one_thread, raw_write, f"s{i}")

    return raw_sqlite, raw.close


def sqlite_references(path: str) -> tuple[list[tuple[str, Request]], Callable[[], None]]:
    """The two yardsticks: Core on a sync engine, and the sqlite3 module, on one thread."""
    one_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite")
    rows = [
        {"token_id": TOKEN, "user_id": "", "role": m.role, "body": json.dumps(m.model_dump())}
        for m in EXCHANGE
    ]
    sync_core, dispose = _core_reference(path, rows, one_thread)
    raw_sqlite, close_raw = _raw_reference(path, rows, one_thread)

    def close() -> None:
        close_raw()
        one_thread.shutdown()
        dispose()

    return [("ref: sync-core-1-thread", sync_core), ("ref: sqlite3-1-thread", raw_sqlite)], close


async def _injections(
    n: int, before: BeforeORM, history: SessionRepository, long_scope: Scope
) -> None:
    async def before_window(_: int) -> None:
        stored = await before.recent(long_scope, 20)
        [m.identity() for m in stored]

    async def now_window(_: int) -> None:
        stored = await history.window(long_scope, 20)
        [s.identity for s in stored]

    print(f"\n{n} history injections of 20 stored messages: read, parse, identity digests")
    for label, request in (("before: async ORM", before_window), ("now: window()", now_window)):
        print(await timed(label, request, n, 1), flush=True)


async def main(n: int, url: str) -> None:
    engine = create_engine(url)
    await create_schema(engine)
    db = Database(engine)
    before = BeforeORM(db)
    history = SessionRepository(db)
    uncached, cached = CuratedRepository(db), CuratedRepository(db, cache_ttl=5.0)
    run_id = f"{time.time_ns():x}"  # sessions of this run only, should the database be reused
    await uncached.put(TOKEN, "memory", "", "# Notes\n" + "- a fact\n" * 40)
    long_scope = Scope(token_id=TOKEN, user="", session=f"{run_id}-{LONG_SESSION}")
    for i in range(10):
        await history.append(
            long_scope,
            [
                Message(role="user", content=f"Question number {i}: what about the weather?"),
                Message(role="assistant", content=f"Answer number {i}: " + "sunny, " * 20),
            ],
        )

    def scope(i: int) -> Scope:
        return Scope(token_id=TOKEN, user="", session=f"{run_id}-s{i}")

    async def before_orm(i: int) -> None:  # what the proxy did per request
        await asyncio.gather(before.recent(scope(i), 20), before.snapshot(TOKEN, ""))
        await before.append(scope(i), EXCHANGE)

    def now(docs: CuratedRepository) -> Request:
        async def request(i: int) -> None:  # what the proxy does per request
            await asyncio.gather(history.window(scope(i), 20), docs.snapshot(TOKEN, ""))
            await history.append(scope(i), EXCHANGE)

        return request

    variants: list[tuple[str, Request]] = [
        ("before: async ORM", before_orm),
        ("now: repositories", now(uncached)),
        ("now: + curated cache", now(cached)),
    ]
    close_refs: Callable[[], None] | None = None
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        refs, close_refs = sqlite_references(parsed.database)
        variants += refs
    print(f"{engine.dialect.name}: {n} requests, each: history read + curated snapshot")
    print("+ history write (2 rows)")
    for label, request in variants:
        for concurrency in (1, 16):
            print(await timed(label, request, n, concurrency), flush=True)
    await _injections(n, before, history, long_scope)
    if close_refs is not None:
        close_refs()
    await db.close()
    await engine.dispose()


def run(coro: Any) -> None:
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


async def _main(n: int, url: str | None) -> None:
    with database(url) as resolved:
        await main(n, resolved)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument(
        "--database-url",
        help="an empty database to use instead of a temporary SQLite file, e.g. "
        "postgresql+asyncpg://postgres@127.0.0.1:5432/bench (tables are created, never dropped)",
    )
    args = parser.parse_args()
    run(_main(args.requests, args.database_url))
