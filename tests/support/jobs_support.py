"""Shared pieces of the process tests of the durable job queue: bounded polls, the admin
queue endpoints, and the SQLite database read (read-only) beside a running server."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.fakes.gateway import FakeGateway

T = TypeVar("T")

OPEN = ("pending", "coalesced", "running")  # not ended: coalesced jobs wait too


def poll(check: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """`check()` until it returns something other than None/False; the bound only keeps a
    broken build from hanging the suite, nothing is timed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def queue_counts(url: str, admin: str, token_id: int) -> dict[str, dict[str, int]]:
    reply = httpx.get(
        f"{url}/v1/admin/tokens/{token_id}/jobs",
        headers={"Authorization": f"Bearer {admin}"},
        timeout=10,
        trust_env=False,
    )
    assert reply.status_code == 200, reply.text
    counts: dict[str, dict[str, int]] = reply.json()["consumers"]
    return counts


def wait_drained(
    url: str, admin: str, token_id: int, timeout: float = 60.0
) -> dict[str, dict[str, int]]:
    """Until the token's queue (as the admin API shows it) has no pending or running job."""

    def check() -> dict[str, dict[str, int]] | None:
        counts = queue_counts(url, admin, token_id)
        busy = any(s in OPEN for statuses in counts.values() for s in statuses)
        return None if busy else counts

    return poll(check, f"token {token_id}'s queue to drain", timeout)


@dataclass(frozen=True, slots=True)
class StoredTurn:
    event_id: str
    token_id: int
    session: str
    user: str
    query: str


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    event_id: str
    consumer: str
    status: str
    step: str | None
    attempts: int


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """The SQLite database opened read-only (safe beside the server that writes it)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        yield conn
    finally:
        conn.close()


def stored_turns(conn: sqlite3.Connection) -> list[StoredTurn]:
    rows = conn.execute(
        "select event_id, token_id, payload from memory_events "
        "where type = 'session.appended' order by id"
    ).fetchall()
    out = []
    for event_id, token_id, payload in rows:
        data: dict[str, Any] = json.loads(payload)
        out.append(StoredTurn(event_id, token_id, data["session"], data["user"], data["query"]))
    return out


def job_rows(conn: sqlite3.Connection) -> list[JobRow]:
    rows = conn.execute(
        "select id, event_id, consumer, status, step, attempts from jobs order by id"
    ).fetchall()
    return [JobRow(*row) for row in rows]


def event_ids(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("select event_id from memory_events")}


FLUSH_ALONE = "/memories/flush: flush without a preceding successful add of this session"


def assert_gateway_sessions(gateway: FakeGateway) -> None:
    """Per Gateway session, adds and flushes as the fake received them: a flush follows an
    add, or a flush (the job was killed after its flush and before it ended: only the flush
    runs again, which the strict fake reports as a flush without an add, and nothing else)."""
    sessions: dict[str, list[str]] = defaultdict(list)
    repeated = 0
    for call in gateway.calls:
        if call.path == "/memories/search":
            continue
        seen = sessions[call.json["session_id"]]
        if call.path == "/memories/flush":
            assert seen, f"a flush before any add: {call}"
            repeated += seen[-1] == "flush"
        seen.append(call.path.rsplit("/", 1)[1])
    assert gateway.violations == [FLUSH_ALONE] * repeated, gateway.violations
