"""Concurrent turns of one session on PostgreSQL: each appends the session's next version, and
every one that is answered must be stored (a version conflict waits its turn or is retried,
never given up), while `/health` keeps answering 200 (a retried conflict is not a storage
failure: a load balancer would eject a healthy instance)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.databases import fresh_postgres_url, needs_postgres
from tests.support.proxy import Proxy, start_proxy

pytestmark = [needs_postgres, pytest.mark.postgres]

TURNS = 20
ROUNDS = 3


@pytest.fixture
def pg_proxy(tmp_path: Path, upstream_server: tuple[FakeUpstream, str]) -> Iterator[Proxy]:
    with fresh_postgres_url() as url:
        server, proxy = start_proxy(tmp_path / "data", upstream_server[1], database_url=url)
        try:
            yield proxy
        finally:
            server.stop()


def _health_while(proxy: Proxy, stop: threading.Event, seen: list[int]) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            seen.append(client.get(f"{proxy.url}/health").status_code)
            stop.wait(0.01)


def test_every_answered_turn_of_one_session_is_stored(pg_proxy: Proxy) -> None:
    proxy = pg_proxy
    token_id, token = proxy.create_token()
    headers = {"X-Session-Id": "busy"}

    def turn(n: int) -> httpx.Response:
        body = {"model": "m", "user": "ana", "messages": [{"role": "user", "content": f"q{n}"}]}
        return proxy.chat(token, headers=headers, **body)

    stop, health = threading.Event(), []
    watcher = threading.Thread(target=_health_while, args=(proxy, stop, health), daemon=True)
    watcher.start()
    replies: list[httpx.Response] = []
    try:
        with ThreadPoolExecutor(TURNS) as pool:
            for r in range(ROUNDS):
                replies += pool.map(turn, range(r * TURNS, (r + 1) * TURNS))
    finally:
        stop.set()
        watcher.join(30)
    assert [r.status_code for r in replies] == [200] * TURNS * ROUNDS
    # A turn that could not be stored says so (`X-MemoryBridge-Stored: false`); none may.
    assert [r.headers.get("x-memorybridge-stored") for r in replies] == [None] * TURNS * ROUNDS
    assert health and set(health) == {200}, health
    # Stored: every turn's question in the session, once, in a row of versions.
    listed = proxy.admin(
        "GET",
        f"/tokens/{token_id}/sessions/messages",
        params={"user": "ana", "session": "busy", "limit": 1000},
    )
    assert listed.status_code == 200, listed.text
    texts = [r["message"]["content"] for r in listed.json()["data"] if r["role"] == "user"]
    assert sorted(texts) == sorted(f"q{n}" for n in range(TURNS * ROUNDS))
