"""The one database of the process: its engine, schema creation, and two ways to use it.

- `Database.run(work)` / `Database.write(work)`: one unit of work as one call, for the chat
  hot path. `work` is a plain function of a synchronous SQLAlchemy `Connection` running Core
  statements, so the same code serves both databases. On a SQLite file it runs on a single
  dedicated thread that owns one connection of a synchronous engine (writes start with
  `BEGIN IMMEDIATE`); elsewhere (PostgreSQL) it runs through the async engine's
  `AsyncConnection.run_sync`. No ORM session, greenlet or aiosqlite hop per statement.
- `Database()` / `Database.begin()`: async ORM sessions, for the admin API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from memory_bridge.storage.migrate import upgrade
from memory_bridge.tenancy.private_files import private_dir, private_file, tighten

log = logging.getLogger(__name__)
T = TypeVar("T")
Work = Callable[[Connection], T]
# Whether the running task's writes are background work (the job worker's, trace batches).
_background: ContextVar[bool] = ContextVar("memory_bridge_background_writes", default=False)
# Turns a request's writes may take in a row while a background write waits.
FAVOUR_LIMIT = 8


def mark_background() -> None:
    """The current task, and every task it starts from now on, writes as background work: on
    SQLite a request's write takes the writer's next turn before it (`WriteTurns`)."""
    _background.set(True)


class WriteTurns:
    """SQLite's one writer, taken in turns within this process (a FIFO per kind of work).

    A request's write (a turn's commit, on the response's path) goes before background writes
    already waiting — the worker's claims, fact events and ends, trace batches — which kept the
    response waiting in line before it (docs/performance.md); at most `FAVOUR_LIMIT`
    in a row while one waits, so the background is never starved.
    """

    def __init__(self) -> None:
        self._held = False
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())
        self._favoured = 0  # request turns given in a row while a background write waited

    async def acquire(self) -> None:
        if not self._held and not any(self._waiting):
            self._held = True
            return
        lane = self._waiting[1 if _background.get() else 0]
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # the turn arrived with the cancellation: pass it on
            elif turn in lane:
                lane.remove(turn)
            raise

    def release(self) -> None:
        requests, background = self._waiting
        while requests or background:
            if background and (not requests or self._favoured >= FAVOUR_LIMIT):
                turn, self._favoured = background.popleft(), 0
            else:
                turn = requests.popleft()
                self._favoured = self._favoured + 1 if background else 0
            if not turn.done():  # a cancelled waiter is skipped
                turn.set_result(None)
                return  # handed over: still held
        self._held = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *_exc: object) -> None:
        self.release()


def create_engine(url: str) -> AsyncEngine:
    # aiosqlite logs every statement with its parameters at DEBUG, and token configs (with
    # their API keys) are parameters: its debug output must never reach a log. For the same
    # reason no engine puts parameters into its log lines or exception strings.
    logging.getLogger("aiosqlite").setLevel(logging.INFO)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _private_sqlite_file(Path(parsed.database))
        # Each aiosqlite connection is a thread: keep a fixed set rather than opening and
        # closing overflow connections (and threads) under load.
        engine = create_async_engine(
            url,
            connect_args={"timeout": 30},
            pool_size=20,
            max_overflow=0,
            pool_timeout=30,
            hide_parameters=True,
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        url, pool_size=10, max_overflow=20, pool_pre_ping=True, hide_parameters=True
    )


def _private_sqlite_file(path: Path) -> None:
    """The database file (and its journal side files) readable by its owner only.

    The file is made before SQLite opens it (an empty file is an empty database), so it is
    0600 from the start; SQLite gives the -wal/-shm/-journal files it creates the mode of the
    database file. Looser ones left by older versions are tightened.
    """
    if not path.parent.exists():
        private_dir(path.parent)  # an existing directory may be shared: the operator's choice
    private_file(path)
    for suffix in _SIDE_FILES:
        tighten(path.with_name(path.name + suffix))


_SIDE_FILES = ("-wal", "-shm", "-journal")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets readers proceed while the single writer commits; busy_timeout waits for locks.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _own_sqlite_connection(dbapi_conn: Any, record: Any) -> None:
    _sqlite_pragmas(dbapi_conn, record)
    # The sqlite3 module must not open transactions by itself: a read is one autocommit
    # statement (no snapshot is held between requests), a write says BEGIN IMMEDIATE.
    dbapi_conn.isolation_level = None


class _OwnThread:
    """One thread owning the one connection of a synchronous SQLite engine.

    Every unit of work is queued to it: no pool, no greenlet, one thread hop per unit.
    """

    def __init__(self, url: URL) -> None:
        self._engine: Engine = create_sync_engine(
            url.set(drivername="sqlite"), connect_args={"timeout": 30}, hide_parameters=True
        )
        event.listen(self._engine, "connect", _own_sqlite_connection)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="memory-bridge-sqlite")
        self._conn: Connection | None = None

    def submit(self, work: Work[T], write: bool) -> asyncio.Future[T]:
        job = self._write if write else self._read
        return asyncio.get_running_loop().run_in_executor(self._executor, job, work)

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.invalidated:
            self._drop()
            self._conn = self._engine.connect()
        return self._conn

    def _read(self, work: Work[T]) -> T:
        conn = self._connection()
        try:
            return work(conn)
        finally:
            self._end(conn)

    def _write(self, work: Work[T]) -> T:
        conn = self._connection()
        driver: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]
        try:
            # Straight to the driver (SQLAlchemy's own transaction begins with the first
            # statement); whatever SQLAlchemy does or does not commit, the driver's is ended.
            driver.execute("BEGIN IMMEDIATE")
            result = work(conn)
            conn.commit()
            if driver.in_transaction:
                driver.commit()
        except BaseException:
            self._end(conn)
            raise
        return result

    def _end(self, conn: Connection) -> None:
        """Roll back whatever is open; a connection that cannot is replaced on next use."""
        try:
            conn.rollback()
            driver: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]
            if driver.in_transaction:
                driver.rollback()
        except Exception:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                conn.close()

    async def close(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._drop)
        finally:
            self._executor.shutdown(wait=False)
            self._engine.dispose()


class Database(async_sessionmaker[AsyncSession]):
    """The process's database: one-call units of work for the hot path, sessions for admin.

    Write units and session write transactions (`begin()`) take turns within this process on
    SQLite: it has one writer at a time, and connections that collide wait in its busy
    handler, which sleeps in growing steps (up to 100 ms); taking turns (`WriteTurns`, a
    request's writes first) keeps the wait as short as the write before it. Readers are
    unaffected (WAL). PostgreSQL has row locks and needs no such turn-taking.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine, expire_on_commit=False)
        self.engine = engine
        sqlite = engine.dialect.name == "sqlite"
        self._write_turn: WriteTurns | None = WriteTurns() if sqlite else None
        file = sqlite and engine.url.database not in (None, "", ":memory:")
        self._own: _OwnThread | None = _OwnThread(engine.url) if file else None
        # A read unit needs no transaction of its own: no BEGIN/ROLLBACK round trips.
        self._reads = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def run(self, work: Work[T]) -> T:
        """Run `work(connection)` as one read unit of work and return its result."""
        if self._own is not None:
            return await self._own.submit(work, write=False)
        async with self._reads.connect() as conn:
            return await conn.run_sync(work)

    async def write(self, work: Work[T]) -> T:
        """Run `work(connection)` in one write transaction, committed when it returns.

        Once started, the transaction completes even if the caller is cancelled (a turn is
        not half-lost because its client went away).
        """
        done: asyncio.Future[T]
        if self._own is None:
            done = asyncio.ensure_future(self._write_async(work))
        else:
            assert self._write_turn is not None
            turn = self._write_turn
            await turn.acquire()
            try:
                done = self._own.submit(work, write=True)
            except BaseException:
                turn.release()
                raise
            done.add_done_callback(lambda _: turn.release())
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            done.add_done_callback(_orphaned)
            raise

    async def _write_async(self, work: Work[T]) -> T:
        async with self._turn(), self.engine.begin() as conn:
            return await conn.run_sync(work)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncSession]:  # type: ignore[override]
        async with self._turn(), super().begin() as session:
            yield session

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        if self._write_turn is None:
            yield
            return
        async with self._write_turn:
            yield

    async def close(self) -> None:
        """Release the dedicated SQLite thread and its connection (the engine is the caller's)."""
        if self._own is not None:
            own, self._own = self._own, None
            await own.close()


def _orphaned(done: asyncio.Future[Any]) -> None:
    """A write whose caller was cancelled: nobody else will see how it ended."""
    exc = None if done.cancelled() else done.exception()
    if exc is not None:
        log.warning(
            "a write finished after its caller was cancelled, failed: %s", type(exc).__name__
        )


def session_factory(engine: AsyncEngine) -> Database:
    return Database(engine)


async def create_schema(engine: AsyncEngine) -> None:
    """The schema at its newest revision: created, or migrated in place (storage.migrate)."""
    async with engine.begin() as conn:
        await conn.run_sync(upgrade)
