"""Fading through the real proxy: with `memory.forge.fadeHalfLifeDays`, a memory said long ago
and never injected since is dropped (`faded`) while an equally relevant one injected recently
is injected; the injection is recorded (written in a batch, read from the database here);
without the setting nothing changes and nothing is recorded; an erasure leaves no byte of the
stats; a bad value is a 422 at save time.

Turns are dated by importing an export whose events all happened on `STORED_AT`, as the dated
recall tests do: the episodic index dates each message by its turn's event.
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import forwarded_recall, wait_until
from tests.support.proxy import Proxy
from tests.support.settled import files_holding

STORED_AT = "2025-03-14T10:00:00+00:00"  # long before today: ~20 half-lives of 30 days
USER = "ada"
BAKER = "Ingrid bakes sourdough bread in Trondheim"
PAINTER = "Olaf paints wooden boats in Trondheim"


def _say(proxy: Proxy, token: str, text: str, session: str) -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=USER,
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def _episodic_done(proxy: Proxy, token_id: int) -> bool:
    counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
    episodic = counts.get("episodic", {})
    return bool(episodic) and set(episodic) == {"done"}


def _old_turns(proxy: Proxy) -> str:
    """An export of two turns (the baker's, the painter's), every event dated `STORED_AT`."""
    source_id, source = proxy.create_token(name="source")
    _say(proxy, source, BAKER, "monday")
    _say(proxy, source, PAINTER, "tuesday")
    wait_until(lambda: _episodic_done(proxy, source_id), what="the source's episodic jobs")
    reply = proxy.admin("GET", f"/tokens/{source_id}/export", params={"include": "sessions"})
    assert reply.status_code == 200, reply.text
    lines = [json.loads(line) for line in reply.text.splitlines()]
    for event in lines[1:]:
        event["created_at"] = STORED_AT
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def _token_with(proxy: Proxy, export: str, name: str, **config: Any) -> tuple[int, str]:
    token_id, token = proxy.create_token(name=name, **config)
    imported = httpx.post(
        f"{proxy.url}/v1/admin/tokens/{token_id}/import",
        content=export.encode(),
        headers={**proxy.admin_headers, "Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    assert imported.status_code == 200, imported.text
    wait_until(lambda: _episodic_done(proxy, token_id), what="the imported turns' indexing")
    return token_id, token


def _trace(proxy: Proxy, token_id: int, request_id: str) -> dict[str, Any]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/traces/{request_id}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def _by_text(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["text"]: c for c in trace["candidates"]}


def _stats(proxy: Proxy) -> list[tuple[int, str, str, str, float]]:
    """Every access-stats row, read from the SQLite file (what a batch wrote)."""
    path = Path(proxy.settings.resolved_database_url.split("///", 1)[1])
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT token_id, user_id, source, item_id, last_used_at FROM memory_access"
        ).fetchall()
    return [(int(t), str(u), str(s), str(i), float(at)) for t, u, s, i, at in rows]


def test_an_old_unused_memory_fades_while_a_recently_used_one_is_injected(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    export = _old_turns(proxy)
    plain_id, plain = _token_with(proxy, export, "plain")
    fading_id, fading = _token_with(
        proxy, export, "fading", memory={"forge": {"fadeHalfLifeDays": 36500}}
    )

    # Off by default: both old memories are injected, no fade in the trace, no stats kept.
    plain_request = _say(proxy, plain, "Who is in Trondheim?", "friday")
    block = forwarded_recall(upstream)
    assert BAKER in block and PAINTER in block
    plain_trace = _trace(proxy, plain_id, plain_request)
    assert plain_trace.get("fading") is None
    assert all("fade" not in c["scores"] for c in plain_trace["candidates"])

    # A century's half-life: nothing has faded yet; asking about the baker injects her turn.
    started = time.time()
    first = _say(proxy, fading, "What does Ingrid bake?", "friday")
    assert BAKER in forwarded_recall(upstream)
    baker = _by_text(_trace(proxy, fading_id, first))[BAKER]
    assert baker["kept"] and 0.9 < baker["scores"]["fade"] < 1 and baker["last_used"] is None
    # The injection is recorded in a batch: the row appears in the database.
    rows = wait_until(
        lambda: [r for r in _stats(proxy) if r[3] == baker["id"]], what="the baker's use written"
    )
    assert rows == [(fading_id, USER, "episodic", baker["id"], pytest.approx(rows[0][4]))]
    assert rows[0][4] >= started
    # Written after the plain token's request: had it recorded anything, it would be there too.
    assert not [r for r in _stats(proxy) if r[0] == plain_id]

    # 30 days: the painter, said long ago and never used, fades; the baker, just used, does not.
    patched = proxy.admin(
        "PATCH", f"/tokens/{fading_id}", json={"memory": {"forge": {"fadeHalfLifeDays": 30}}}
    )
    assert patched.status_code == 200, patched.text
    second = _say(proxy, fading, "Who is in Trondheim?", "saturday")
    block = forwarded_recall(upstream)
    assert BAKER in block and PAINTER not in block
    trace = _trace(proxy, fading_id, second)
    assert trace["fading"] == {"half_life_days": 30.0, "floor": 0.1}
    items = _by_text(trace)
    assert items[BAKER]["kept"] and items[BAKER]["scores"]["fade"] > 0.99
    assert items[BAKER]["last_used"] == datetime.now(UTC).date().isoformat()
    painter = items[PAINTER]
    assert painter["dropped"] == "faded" and painter["scores"]["fade"] < 0.1
    assert painter["last_used"] is None and painter["date"] == "2025-03-14"
    assert painter["importance"] == 0.5
    # Equal relevance: the painter matched the question as well as the baker did.
    assert painter["scores"]["sparse_coverage"] == items[BAKER]["scores"]["sparse_coverage"]


def test_erasing_the_end_user_leaves_no_byte_of_their_access_stats(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    export = _old_turns(proxy)
    token_id, token = _token_with(
        proxy, export, "fading", memory={"forge": {"fadeHalfLifeDays": 36500}}
    )
    request_id = _say(proxy, token, "What does Ingrid bake?", "friday")
    baker = _by_text(_trace(proxy, token_id, request_id))[BAKER]
    assert baker["kept"]
    wait_until(lambda: [r for r in _stats(proxy) if r[3] == baker["id"]], what="the use written")
    data = proxy.settings.memory_bridge_data_dir

    erased = proxy.admin("DELETE", f"/tokens/{token_id}/users/{USER}")
    assert erased.status_code == 200, erased.text
    assert erased.json()["counts"]["access"] >= 1
    assert not [r for r in _stats(proxy) if r[0] == token_id]
    # The item's id was in the stats (and in the shard and the trace, erased too): no file
    # holds it now, the database's free pages and WAL included.
    assert files_holding(data, baker["id"]) == []


@pytest.mark.parametrize(
    ("forge", "field"),
    [
        ({"fadeHalfLifeDays": -1}, "memory.forge.fadeHalfLifeDays"),
        ({"fadeHalfLifeDays": 1e9}, "memory.forge.fadeHalfLifeDays"),
        ({"fadeHalfLifeDays": "30"}, "memory.forge.fadeHalfLifeDays"),
        ({"fadeHalfLifeDays": True}, "memory.forge.fadeHalfLifeDays"),
        ({"fadeFloor": 1.5}, "memory.forge.fadeFloor"),
    ],
)
def test_a_bad_fading_value_is_refused_at_save_time(
    proxy: Proxy, forge: dict[str, Any], field: str
) -> None:
    token_id, _ = proxy.create_token(name="fading")
    bad = proxy.admin("PATCH", f"/tokens/{token_id}", json={"memory": {"forge": forge}})
    assert bad.status_code == 422 and field in bad.text
    created = proxy.admin(
        "POST",
        "/tokens",
        json={"name": "x", "llm_base_url": proxy.upstream_url, "memory": {"forge": forge}},
    )
    assert created.status_code == 422 and field in created.text
    saved = proxy.admin("GET", f"/tokens/{token_id}").json()["config"]
    assert "forge" not in saved.get("memory", {})
