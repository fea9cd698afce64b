"""Erasure with no exceptions, through the real proxy: the token-wide user "" can be erased;
a trace of a request that was never stored goes with its end user; an erasure during a rebuild
leaves nothing in the new shard's files; a killed import's staged file is deleted by the next
erasure and at start-up; a token deleted without purge can be purged afterwards. Every byte
under the data directory is scanned after each, and each erasure's receipt is checked (in the
answer and in the audit log)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.databases import fresh_postgres_url, needs_postgres
from tests.support.longterm_support import memory_fields, wait_until
from tests.support.loopback import LoopbackServer
from tests.support.proxy import Proxy, start_proxy
from tests.support.settled import files_holding, jobs_settled

MARKER = "Zyqvorth7731"
KEPT = "Plimsoll4408"
STALE_IMPORT = '{"origin":"e1","type":"session.appended","payload":{"text":"%s"}}\n'


def _say(proxy: Proxy, token: str, text: str, user: str | None, session: str = "s") -> None:
    extra: dict[str, Any] = {} if user is None else {"user": user}
    proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        extra_headers={"X-Session-Id": session},
        **extra,
    )


def _check_receipt(proxy: Proxy, token_id: int, receipt: dict[str, Any]) -> None:
    assert set(receipt["layers"]) == {"database", "longterm", "vectors", "imports", "storage"}
    assert receipt["layers"]["storage"].startswith("sqlite: secure_delete")
    assert receipt["erased_at"].endswith("+00:00") and receipt["seconds"] >= 0
    audit = proxy.admin("GET", f"/tokens/{token_id}/events", params={"type": "user_erased"})
    kept = audit.json()["data"][-1]
    assert kept["data"]["counts"] == receipt["counts"]
    assert kept["data"]["generations_compacted"] == receipt["generations_compacted"]
    assert kept["data"]["erased_at"] == receipt["erased_at"]


def test_the_token_wide_user_is_erased_with_a_receipt(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, f"My locker code is {MARKER}", None)
    _say(proxy, token, f"My bike code is {KEPT}", "bob")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    assert proxy.admin("DELETE", f"/tokens/{token_id}/users").status_code == 422  # user needed
    erased = proxy.admin("DELETE", f"/tokens/{token_id}/users", params={"user": ""})
    assert erased.status_code == 200, erased.text
    receipt = erased.json()
    assert receipt["user"] == ""
    assert receipt["counts"]["messages"] == 2 and receipt["counts"]["episodic"] == 2
    assert receipt["counts"]["longterm"] == 1 and receipt["longterm"] == "erased"
    assert receipt["generations_compacted"]  # the episodic and the long-term shard
    _check_receipt(proxy, token_id, receipt)
    data_dir = proxy.settings.memory_bridge_data_dir
    assert files_holding(data_dir, KEPT)  # bob's stays, and the scan finds it
    assert files_holding(data_dir, MARKER) == []
    users = proxy.admin("GET", f"/tokens/{token_id}/users").json()["data"]
    assert [u["user"] for u in users] == ["bob"]


def test_a_trace_of_a_request_never_stored_goes_with_its_end_user(
    mem0_proxy: Proxy, upstream: FakeUpstream
) -> None:
    proxy = mem0_proxy  # long-term facts only: a trace's items carry no event lineage
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _say(proxy, token, f"My locker code is {MARKER}", "alice")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    upstream.enqueue(Scenario(status=500))
    failed = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "My locker code?"}]},
        headers={"Authorization": f"Bearer {token}", "X-User-Id": "alice"},
        timeout=30,
    )
    assert failed.status_code == 500  # passed through: the turn is not stored, its trace is
    wait_until(
        lambda: any(MARKER in body for body in _trace_bodies(proxy)), what="the failed turn's trace"
    )
    erased = proxy.admin("DELETE", f"/tokens/{token_id}/users/alice")
    assert erased.status_code == 200, erased.text
    assert erased.json()["counts"]["traces"] >= 1
    assert not any(MARKER in body for body in _trace_bodies(proxy))
    assert files_holding(proxy.settings.memory_bridge_data_dir, MARKER) == []


def _trace_bodies(proxy: Proxy) -> list[str]:
    db = sqlite3.connect(proxy.settings.resolved_database_url.split("///", 1)[1])
    try:
        return [r[0] for r in db.execute("select body from context_traces")]
    finally:
        db.close()


def test_an_erasure_during_a_rebuild_leaves_nothing_in_the_new_shard(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    for n in range(3):
        _say(proxy, token, f"Note {n}: my locker code is {MARKER}", "alice", f"s{n}")
    _say(proxy, token, f"My bike code is {KEPT}", "bob")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    # The rebuild stops while it embeds one of alice's turns (it read their page already)...
    upstream.hold_embeddings(lambda body: MARKER in json.dumps(body))
    seen = len(upstream.embedding_requests)
    started = proxy.admin("POST", f"/tokens/{token_id}/rebuild", params={"layer": "episodic"})
    assert started.status_code == 202, started.text
    wait_until(
        lambda: any(MARKER in json.dumps(r.json) for r in upstream.embedding_requests[seen:]),
        what="the rebuild at alice's turn",
    )
    # ...alice is erased meanwhile, and the rebuild indexes the turn it held after that.
    erased = proxy.admin("DELETE", f"/tokens/{token_id}/users/alice")
    assert erased.status_code == 200, erased.text
    _check_receipt(proxy, token_id, erased.json())
    upstream.release_embeddings()

    def idle() -> bool:
        state = proxy.admin("GET", f"/tokens/{token_id}/rebuild").json()["layers"]["episodic"]
        assert state["state"] != "failed", state
        return bool(state["state"] == "idle")

    wait_until(idle, what="the rebuild's switch")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    data_dir = proxy.settings.memory_bridge_data_dir
    assert files_holding(data_dir / "vectors", KEPT)
    assert files_holding(data_dir, MARKER) == []


def test_a_killed_imports_staged_file_is_deleted_by_erasure_and_at_start_up(
    proxy: Proxy, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    token_id, _ = proxy.create_token()
    staging = proxy.settings.memory_bridge_data_dir / "imports"
    staging.mkdir(exist_ok=True)
    # What an import killed mid-way leaves: its staged plaintext, no longer locked by anyone.
    left = staging / "import-0123456789abcdef0123456789abcdef.ndjson"
    left.write_text(STALE_IMPORT % MARKER)
    # An import in flight (its file locked) is not touched.
    live = staging / "import-fedcba9876543210fedcba9876543210.ndjson"
    live.write_text(STALE_IMPORT % KEPT)
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        erased = proxy.admin("DELETE", f"/tokens/{token_id}/users/alice")
        assert erased.status_code == 200, erased.text
        assert erased.json()["counts"]["imports"] == 1
        assert not left.exists() and live.exists()
    finally:
        os.close(fd)
    assert files_holding(proxy.settings.memory_bridge_data_dir, MARKER) == []

    # At start-up, whatever was left is gone before anything is served.
    from memory_bridge.server.app import create_app

    left.write_text(STALE_IMPORT % MARKER)
    with LoopbackServer(create_app(proxy.settings)):
        assert not left.exists() and not live.exists()


def test_a_token_deleted_without_purge_can_be_purged_afterwards(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    )
    _, other = proxy.create_token(name="other")
    _say(proxy, token, f"My locker code is {MARKER}", "alice")
    _say(proxy, other, f"My bike code is {KEPT}", "alice")
    wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
    assert proxy.admin("DELETE", f"/tokens/{token_id}").status_code == 204
    data_dir = proxy.settings.memory_bridge_data_dir
    assert files_holding(data_dir, MARKER)  # a plain delete keeps the data...
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert files_holding(data_dir, MARKER) == []  # ...a purge afterwards takes it all
    assert files_holding(data_dir, KEPT)
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 404
    assert proxy.admin("DELETE", f"/tokens/{token_id + 99}?purge=true").status_code == 404


@needs_postgres
@pytest.mark.postgres
def test_on_postgresql_the_table_files_keep_nothing_of_the_erased(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    """The documented procedure: the erasure's VACUUM FULL, then a checkpoint (so every page
    is in its file and the old files are gone); the WAL is documented to keep the rows."""
    with fresh_postgres_url() as url:
        server, proxy = start_proxy(tmp_path / "data", upstream_server[1], database_url=url)
        try:
            token_id, token = proxy.create_token(
                **memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
            )
            _say(proxy, token, f"My locker code is {MARKER}", "alice")
            _say(proxy, token, f"My bike code is {KEPT}", "bob")
            wait_until(lambda: jobs_settled(proxy, token_id), what="the jobs")
            erased = proxy.admin("DELETE", f"/tokens/{token_id}/users/alice")
            assert erased.status_code == 200, erased.text
            receipt = erased.json()
            assert receipt["layers"]["storage"].startswith("postgresql: VACUUM FULL")
            assert receipt["counts"]["messages"] == 2 and receipt["counts"]["episodic"] == 2
        finally:
            server.stop()
        files = _database_files(url)
        assert files_holding(files, KEPT)  # the scan finds what is there
        assert files_holding(files, MARKER) == []
        assert files_holding(proxy.settings.memory_bridge_data_dir, MARKER) == []


def _database_files(url: str) -> Path:
    """The directory of the database's relation files, after a checkpoint."""

    async def locate() -> Path:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute("CHECKPOINT")
            home = await conn.fetchval("SHOW data_directory")
            oid = await conn.fetchval(
                "SELECT oid FROM pg_database WHERE datname = current_database()"
            )
        finally:
            await conn.close()
        return Path(home) / "base" / str(oid)

    files = asyncio.run(locate())
    if not os.access(files, os.R_OK):
        pytest.skip("the PostgreSQL data directory is not readable here")
    return files
