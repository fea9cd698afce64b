"""What the storage layer costs per chat request, against references (SQLite, in process).

    python scripts/bench/storage_micro.py [--requests 2000]

A chat request through MemoryBridge does three units of work on the database: the history
read (`SessionRepository.recent`), the curated snapshot (`CuratedRepository.snapshot`) and,
after the reply, the history write (`SessionRepository.append`). This times exactly those
calls on a fresh SQLite file, sequentially and with 16 requests at once, and then the same
statements two other ways, as the yardstick for an optimisation:

- `sync-core-1-thread`: the same SQLAlchemy Core statements on a synchronous engine, each
  unit of work one call on a single dedicated thread (`run_in_executor`), `BEGIN IMMEDIATE`;
- `sqlite3-1-thread`: the same SQL through the standard `sqlite3` module on that thread.

Figures are wall milliseconds per request (three units of work) and requests/s; the process
is otherwise idle, so at concurrency 16 they also show lock contention and thread hops.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event, insert, select
from sqlalchemy.engine import Engine

from memory_bridge.messages import Message
from memory_bridge.storage.curated import CuratedRepository
from memory_bridge.storage.db import _sqlite_pragmas, create_engine, create_schema, session_factory
from memory_bridge.storage.sessions import SessionRepository
from memory_bridge.storage.tables import curated, messages
from memory_bridge.turn import Scope

Request = Callable[[int], Awaitable[None]]
EXCHANGE = [
    Message(role="user", content="Say hello to the benchmark, please."),
    Message(role="assistant", content="Hello from the benchmark upstream."),
]


async def timed(label: str, request: Request, n: int, concurrency: int) -> str:
    await request(-1)
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await request(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    per_request = elapsed / n * 1000
    return f"{label:22s} c={concurrency:<3d} {per_request:7.3f} ms/request {n / elapsed:8.0f}/s"


async def main(n: int) -> None:
    path = Path(tempfile.mkdtemp(prefix="mb-storage-")) / "bench.db"
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    await create_schema(engine)
    sessions = session_factory(engine)
    history, docs = SessionRepository(sessions), CuratedRepository(sessions)
    await docs.put(1, "memory", "", "# Notes\n" + "- a fact\n" * 40)

    async def current(i: int) -> None:  # what the proxy does today, per request
        scope = Scope(token_id=1, user="", session=f"s{i}")
        await asyncio.gather(history.recent(scope, 20), docs.snapshot(1, ""))
        await history.append(scope, EXCHANGE)

    sync_engine = create_sync_engine(f"sqlite:///{path}")
    event.listen(sync_engine, "connect", _sqlite_pragmas)
    one_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite")
    loop = asyncio.get_running_loop()
    rows = [
        {"token_id": 1, "user_id": "", "role": m.role, "body": json.dumps(m.model_dump())}
        for m in EXCHANGE
    ]

    def core_read(db: Engine, session: str) -> None:
        with db.connect() as conn:
            conn.execute(
                select(messages.c.body)
                .where(
                    messages.c.token_id == 1,
                    messages.c.user_id == "",
                    messages.c.session_id == session,
                )
                .order_by(messages.c.id.desc())
                .limit(20)
            ).all()
            conn.execute(
                select(curated.c.kind, curated.c.user_id, curated.c.body).where(
                    curated.c.token_id == 1, curated.c.user_id.in_({""})
                )
            ).all()

    def core_write(db: Engine, session: str) -> None:
        with db.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            conn.execute(insert(messages), [{**r, "session_id": session} for r in rows])
            conn.commit()

    async def sync_core(i: int) -> None:
        await loop.run_in_executor(one_thread, core_read, sync_engine, f"s{i}")
        await loop.run_in_executor(one_thread, core_write, sync_engine, f"s{i}")

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
        await loop.run_in_executor(one_thread, raw_read, f"s{i}")
        await loop.run_in_executor(one_thread, raw_write, f"s{i}")

    variants: list[tuple[str, Request]] = [
        ("current (async ORM)", current),
        ("sync-core-1-thread", sync_core),
        ("sqlite3-1-thread", raw_sqlite),
    ]
    print(f"{n} requests, each: history read + curated snapshot + history write (2 rows)")
    for label, request in variants:
        for concurrency in (1, 16):
            print(await timed(label, request, n, concurrency), flush=True)
    raw.close()
    one_thread.shutdown()
    sync_engine.dispose()
    await engine.dispose()


def run(coro: Any) -> None:
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    run(main(parser.parse_args().requests))
