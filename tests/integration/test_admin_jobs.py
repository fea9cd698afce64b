"""The admin queue endpoints driven as an operator would, against a real proxy on loopback:
the summary per consumer and status, the jobs that need attention (an `unknown` Gateway add),
a manual retry (409 for a job that is not failed or unknown, 404 for an unknown token), the
Gateway's add→flush once per turn, and Mem0 retries that never duplicate a turn's memories.

Mem0's extraction answers carry a per-call counter (`tests.support.tagged_memories`), so
Mem0's own hash dedup cannot hide a second write of a turn: memories are counted per turn by
their text and per event by their `event_id` tag.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.gateway import FakeGateway
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.hybrid_memory_support import USER_KEY, db_rows, gateway_memory
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    Running,
    memories,
    memory_fields,
    start,
    wait_until,
)
from tests.support.proxy import Proxy
from tests.support.tagged_memories import CountingExtractor, per_turn, tagged_memories

JOB_SETTINGS: dict[str, Any] = {
    "job_poll_seconds": 0.05,
    "job_backoff_seconds": 0.05,
    "job_max_attempts": 5,
    "log_level": "WARNING",
}


@pytest.fixture
def slow_gateway(gateway: FakeGateway) -> Iterator[FakeGateway]:
    """The shared fake Gateway with adds hanging `hang_seconds` (restored afterwards)."""
    default = gateway.hang_seconds
    gateway.fail("add", "timeout")
    try:
        yield gateway
    finally:
        gateway.hang_seconds = default


@pytest.fixture
def extractor(upstream: FakeUpstream) -> CountingExtractor:
    fake = CountingExtractor()
    upstream.memory_responder = fake
    return fake


@pytest.fixture
def run(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Running]:
    running = start(tmp_path / "data", upstream_server[1], **JOB_SETTINGS)
    try:
        yield running
    finally:
        upstream.release_embeddings()
        running.server.stop()


# ---- helpers ---------------------------------------------------------------------------


def summary(proxy: Proxy, token_id: int) -> dict[str, Any]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/jobs")
    assert reply.status_code == 200, reply.text
    data: dict[str, Any] = reply.json()
    return data


def attention(proxy: Proxy, token_id: int, **params: Any) -> list[dict[str, Any]]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/jobs/attention", params=params)
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def counts(proxy: Proxy, token_id: int) -> dict[str, dict[str, int]]:
    consumers: dict[str, dict[str, int]] = summary(proxy, token_id)["consumers"]
    return consumers


def drained(proxy: Proxy, token_id: int, consumer: str, jobs: int) -> dict[str, int]:
    """Wait until `consumer` has `jobs` jobs and no job of any consumer (other layers, e.g.
    episodic memory, may have their own) is pending or running; `consumer`'s counts."""
    seen: list[dict[str, dict[str, int]]] = [{}]

    def check() -> dict[str, int]:  # {} (falsy) until drained
        found = seen[0] = counts(proxy, token_id)
        busy = any(s in ("pending", "running") for st in found.values() for s in st)
        mine = found.get(consumer, {})
        return mine if sum(mine.values()) == jobs and not busy else {}

    try:
        return wait_until(check, what=f"{jobs} {consumer} job(s) drained")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the queue: {seen[0]}") from None


def turn(proxy: Proxy, token: str, text: str, session: str = "s1") -> httpx.Response:
    reply = proxy.chat(
        token,
        {"X-Session-Id": session},
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": text}],
    )
    assert reply.status_code == 200, reply.text
    assert "x-memorybridge-stored" not in reply.headers
    return reply


def added_texts(gateway: FakeGateway) -> list[str]:
    """The user text of every Gateway add received, in order (complete or not)."""
    return [str(p["messages"][0]["content"]) for p in gateway.payloads("add")]


def event_tags(run: Running, token_id: int) -> Counter[str]:
    """Memories per event id (their metadata tag), read from the proxy's vector engine."""
    return Counter(m.event_id for m in tagged_memories(run.pool.engine, token_id))


# ---- the Gateway ---------------------------------------------------------------------------


def test_add_then_flush_once_per_turn_in_session_order(
    run: Running, slow_gateway: FakeGateway, gw_url: str
) -> None:
    gateway = slow_gateway
    proxy = run.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    # Each add is answered after a while: a session's later turns wait in the queue meanwhile.
    gateway.hang_seconds = 0.2
    texts = {"a": ["a one", "a two", "a three"], "b": ["b one", "b two"]}
    for first, second in itertools.zip_longest(texts["a"], texts["b"]):
        turn(proxy, token, first, session="a")
        if second is not None:
            turn(proxy, token, second, session="b")
    assert drained(proxy, token_id, "gateway", 5) == {"done": 5}
    assert summary(proxy, token_id)["oldest_pending_age_seconds"] is None
    assert gateway.violations == []
    assert Counter(added_texts(gateway)) == Counter(texts["a"] + texts["b"])
    for session, said in texts.items():
        calls = [
            (
                c.path.rsplit("/", 1)[1],
                c.json["messages"][0]["content"] if "messages" in c.json else "",
            )
            for c in gateway.calls
            if c.path != "/memories/search" and c.json["session_id"] == f"chat:{session}"
        ]
        # add→flush, turn after turn: never two adds in a row, never a flush overtaken.
        assert calls == [step for text in said for step in (("add", text), ("flush", ""))]
    assert attention(proxy, token_id) == []


def test_an_unknown_add_needs_attention_and_a_retry_replays_it(
    run: Running, slow_gateway: FakeGateway, gw_url: str
) -> None:
    gateway = slow_gateway
    proxy = run.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url, timeoutSeconds=0.5))
    gateway.hang_seconds = 30  # hangs until the proxy gives up: the add may have happened
    turn(proxy, token, "remember the blue door")
    assert drained(proxy, token_id, "gateway", 1) == {"unknown": 1}
    (job,) = attention(proxy, token_id)
    assert job["consumer"] == "gateway"
    assert job["status"] == "unknown"
    assert job["step"] == "add_unknown"
    assert job["attempts"] == 1
    assert USER_KEY not in json.dumps(job)
    assert attention(proxy, token_id, status="failed") == []
    assert [j["id"] for j in attention(proxy, token_id, status="unknown")] == [job["id"]]
    assert added_texts(gateway) == ["remember the blue door"]
    assert [c.path for c in gateway.calls].count("/memories/flush") == 0

    # The session goes on: an unknown job does not hold its successors back.
    gateway.fail("add", None)
    turn(proxy, token, "and the red window")
    assert drained(proxy, token_id, "gateway", 2) == {"unknown": 1, "done": 1}
    assert added_texts(gateway) == ["remember the blue door", "and the red window"]

    # A done job cannot be retried (409), nor can anything of a token that does not exist.
    # (Each turn also has an episodic job: every token indexes its conversation.)
    done = "select id from jobs where status = 'done' and consumer = 'gateway'"
    (done_id,) = [r[0] for r in db_rows(proxy, done)]
    conflict = proxy.admin("POST", f"/tokens/{token_id}/jobs/{done_id}/retry")
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["error"]["type"] == "conflict_error"
    missing = proxy.admin("POST", f"/tokens/{token_id + 1000}/jobs/{job['id']}/retry")
    assert missing.status_code == 404, missing.text
    assert proxy.admin("GET", f"/tokens/{token_id + 1000}/jobs").status_code == 404
    assert proxy.admin("GET", f"/tokens/{token_id + 1000}/jobs/attention").status_code == 404

    # The operator checked the Gateway and replays the add on purpose: sent once more, flushed.
    retried = proxy.admin("POST", f"/tokens/{token_id}/jobs/{job['id']}/retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["status"] in ("pending", "running", "done")
    assert drained(proxy, token_id, "gateway", 2) == {"done": 2}
    assert added_texts(gateway) == [
        "remember the blue door",
        "and the red window",
        "remember the blue door",
    ]
    assert [c.path for c in gateway.calls if c.path != "/memories/search"][-1] == "/memories/flush"
    assert gateway.violations == []
    assert attention(proxy, token_id) == []
    again = proxy.admin("POST", f"/tokens/{token_id}/jobs/{job['id']}/retry")
    assert again.status_code == 409, again.text


def test_a_refused_add_fails_for_good_and_is_never_flushed(
    run: Running, gateway: FakeGateway, gw_url: str
) -> None:
    proxy = run.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    gateway.fail("add", "401")
    turn(proxy, token, "a refused turn")
    assert drained(proxy, token_id, "gateway", 1) == {"failed": 1}
    (job,) = attention(proxy, token_id, status="failed")
    assert job["step"] == "add_failed" and job["attempts"] == 1
    assert USER_KEY not in json.dumps(job)
    assert added_texts(gateway) == ["a refused turn"]  # tried once, never repeated
    assert "/memories/flush" not in [c.path for c in gateway.calls]


# ---- Mem0 ------------------------------------------------------------------------------


def test_a_failed_extraction_is_retried_and_stored_once(
    run: Running, upstream: FakeUpstream, extractor: CountingExtractor
) -> None:
    proxy = run.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    extractor.fail_first = 2
    turn(proxy, token, "I keep bees")
    assert drained(proxy, token_id, "longterm", 1) == {"done": 1}
    assert len(upstream.memory_requests) == 3
    assert per_turn([m["memory"] for m in memories(proxy, token_id)]) == {"I keep bees": 1}
    assert list(event_tags(run, token_id).values()) == [1]


def test_a_retry_removes_what_an_earlier_attempt_wrote(
    run: Running, upstream: FakeUpstream, extractor: CountingExtractor
) -> None:
    """The first attempt stores its memory, then fails before its job ends (as a worker that
    dies after Mem0 wrote would): the retry removes it by its event id and stores it again."""
    proxy = run.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    pool = run.pool
    real_add = pool.add
    calls = itertools.count(1)

    async def add_then_fail(*args: Any, **kwargs: Any) -> int:
        added = await real_add(*args, **kwargs)
        if next(calls) == 1:
            raise RuntimeError("the worker died after Mem0 wrote")
        return added

    pool.add = add_then_fail  # type: ignore[method-assign]
    turn(proxy, token, "my cat is called Miso")
    turn(proxy, token, "I live in Lyon")
    assert drained(proxy, token_id, "longterm", 2) == {"done": 2}
    found = [m["memory"] for m in memories(proxy, token_id)]
    assert per_turn(found) == {"my cat is called Miso": 1, "I live in Lyon": 1}, found
    assert sorted(event_tags(run, token_id).values()) == [1, 1]
    (first,) = [t for t in found if t.startswith("my cat")]
    assert first.endswith(" #2")  # the memory of the first attempt is gone
    # The log says so: the facts kept are retained, the first attempt's one deleted.
    rows = db_rows(
        proxy,
        "select type, payload from memory_events where type like 'longterm.%' order by id",
    )
    logged = [(t, json.loads(p)) for t, p in rows]
    kept = {m["id"]: m["memory"] for m in memories(proxy, token_id)}
    retained = {p["memory_id"]: p["text"] for t, p in logged if t == "longterm.retained"}
    assert retained == kept
    deleted = [p for t, p in logged if t == "longterm.deleted"]
    assert [p["reason"] for p in deleted] == ["replaced_by_retry"]
    assert deleted[0]["memory_id"] not in kept


def test_a_timed_out_attempt_that_writes_late_is_not_duplicated(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    extractor: CountingExtractor,
) -> None:
    """An attempt that times out keeps running in its thread and may still write after its job
    was handed to a retry: the retry must not add beside that late write."""
    running = start(tmp_path / "data", upstream_server[1], memory_store_timeout=1.0, **JOB_SETTINGS)
    try:
        proxy = running.proxy
        token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))

        def hold_after_first_extraction(n: int) -> None:
            if n == 1:  # the embedding of what attempt 1 extracted waits: attempt 1 times out
                upstream.hold_embeddings()

        extractor.on_call = hold_after_first_extraction
        turn(proxy, token, "my bike is green")

        def second_attempt() -> bool:
            (job,) = db_rows(proxy, "select attempts from jobs where consumer = 'longterm'")
            return int(job[0]) >= 2

        wait_until(second_attempt, what="a second attempt")
        upstream.release_embeddings()  # attempt 1's thread goes on and writes, late
        assert drained(proxy, token_id, "longterm", 1) == {"done": 1}
        found = [m["memory"] for m in memories(proxy, token_id)]
        assert per_turn(found) == {"my bike is green": 1}, found
        assert list(event_tags(running, token_id).values()) == [1]
    finally:
        upstream.release_embeddings()
        running.server.stop()


def test_job_errors_are_scrubbed_of_the_tokens_secrets(
    run: Running, upstream: FakeUpstream, extractor: CountingExtractor
) -> None:
    proxy = run.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.memory_responder = lambda texts: Scenario(
        status=500, error_body={"error": {"message": f"bad keys {MEMORY_LLM_KEY} {EMBED_KEY}"}}
    )
    turn(proxy, token, "a turn whose memory never lands")
    assert drained(proxy, token_id, "longterm", 1) == {"failed": 1}
    (job,) = [j for j in attention(proxy, token_id) if j["consumer"] == "longterm"]
    assert job["attempts"] == JOB_SETTINGS["job_max_attempts"]
    assert job["last_error"]
    for secret in (MEMORY_LLM_KEY, EMBED_KEY):
        assert secret not in json.dumps(job)
