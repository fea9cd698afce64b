from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memory_bridge.storage.db import Database, create_engine, create_schema, session_factory
from tests.fakes.gateway import FakeGateway
from tests.fakes.upstream import FakeUpstream
from tests.support.databases import fresh_postgres_url, needs_postgres
from tests.support.hybrid_memory_support import Served
from tests.support.loopback import LoopbackServer
from tests.support.proxy import Proxy, start_proxy


@pytest.fixture(scope="session")
def upstream_server() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with LoopbackServer(fake.app) as server:
        yield fake, server.url


@pytest.fixture
def upstream(upstream_server: tuple[FakeUpstream, str]) -> FakeUpstream:
    fake, _ = upstream_server
    fake.reset()
    return fake


@pytest.fixture
def proxy(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1])
    try:
        yield proxy
    finally:
        server.stop()


@pytest.fixture(
    params=[
        pytest.param("sqlite"),
        pytest.param("postgres", marks=[needs_postgres, pytest.mark.postgres]),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of each kind: SQLite, and PostgreSQL where one is reachable."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    else:
        with fresh_postgres_url() as url:
            yield url


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """The storage layer alone on a fresh database of each kind, its schema made."""
    engine = create_engine(database_url)
    await create_schema(engine)
    database = session_factory(engine)
    yield database
    await database.close()
    await engine.dispose()


@pytest.fixture
def mem0_proxy(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    """A proxy whose long-term recall is Mem0 alone (episodic recall off): for the tests of
    Mem0's facts; episodic recall has tests of its own."""
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], episodic_memory=False)
    try:
        yield proxy
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway_server() -> Iterator[tuple[FakeGateway, str]]:
    fake = FakeGateway()
    with LoopbackServer(fake.app) as server:
        yield fake, server.url


@pytest.fixture
def gateway(gateway_server: tuple[FakeGateway, str]) -> Iterator[FakeGateway]:
    fake, _ = gateway_server
    fake.reset()
    yield fake
    fake.release()  # end a hang a failed test may have left behind


@pytest.fixture
def gw_url(gateway_server: tuple[FakeGateway, str]) -> str:
    return gateway_server[1]


@pytest.fixture
def served(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Served]:
    """A proxy that can be drained (its background work awaited) or restarted on its data.

    The hybrid layer's tests (curated + Gateway) check the forwarded prompt to the byte:
    episodic recall, on by default and tested on its own, is off here."""
    served = Served(tmp_path / "data", upstream_server[1], episodic_memory=False)
    try:
        yield served
    finally:
        served.drain()


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record at any level, from every thread (the servers run in threads)."""
    caplog.set_level(logging.DEBUG)
    return caplog
