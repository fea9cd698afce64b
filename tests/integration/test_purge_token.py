"""Purging a token: nothing left behind, not even by a turn still being answered when the purge
ran, and a purge that fails midway keeps the token so that a retry finishes it."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from sqlalchemy import create_engine, func, select

from memory_bridge.storage.tables import context_traces, curated, events, jobs, memory_events
from memory_bridge.storage.tables import messages as message_rows
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.longterm_support import memory_fields, wait_until
from tests.support.proxy import Proxy
from tests.support.settled import jobs_settled

TABLES = (message_rows, memory_events, jobs, curated, events, context_traces)
WORDS = " ".join(f"word{i}" for i in range(30))


def _rows(proxy: Proxy, token_id: int) -> dict[str, int]:
    path = proxy.settings.resolved_database_url.split("///", 1)[1]
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return {
                t.name: int(
                    conn.execute(select(func.count()).where(t.c.token_id == token_id)).scalar() or 0
                )
                for t in TABLES
            }
    finally:
        engine.dispose()


def test_a_purge_during_a_stream_leaves_nothing_of_that_turn(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    # 30 pieces 0.1 s apart: the purge below is over long before the stream ends.
    upstream.enqueue(Scenario(content=WORDS, chunk_delay=0.1))
    started, finished = threading.Event(), threading.Event()
    received: list[str] = []

    def converse() -> None:
        stream = proxy.client(token).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "count"}], stream=True, user="ada"
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
                started.set()
        finished.set()

    talker = threading.Thread(target=converse)
    talker.start()
    assert started.wait(30)
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert not finished.is_set()  # the turn was still being answered
    talker.join(60)
    assert finished.is_set() and "".join(received).split() == WORDS.split()
    assert _rows(proxy, token_id) == dict.fromkeys((t.name for t in TABLES), 0)
    assert not (proxy.settings.memory_bridge_data_dir / "vectors" / f"t{token_id}").exists()


def test_a_purge_that_fails_midway_keeps_the_token_and_a_retry_finishes(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    proxy.client(token).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My bike is green"}], user="ada"
    )
    wait_until(lambda: jobs_settled(proxy, token_id), what="the turn's jobs")
    # The episodic layer cannot be dropped: its directory is a file now.
    shards = proxy.settings.memory_bridge_data_dir / "vectors" / f"t{token_id}"
    shutil.rmtree(shards)
    shards.write_text("in the way")

    failed = proxy.admin("DELETE", f"/tokens/{token_id}?purge=true")
    assert failed.status_code == 500
    assert proxy.admin("GET", f"/tokens/{token_id}").status_code == 200  # still there

    Path(shards).unlink()
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert proxy.admin("GET", f"/tokens/{token_id}").status_code == 404
    assert _rows(proxy, token_id) == dict.fromkeys((t.name for t in TABLES), 0)
