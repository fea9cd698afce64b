"""Backpressure on memory work (docs/operations.md#backpressure): past the backlog's bound a
turn's episodic job is coalesced, not refused and not lost; a worker then indexes the backlog
in batches (far fewer embedding calls than turns), every turn ends up recallable, and
`/metrics` reports the pending jobs and how far memory lags behind the stored turns.

The proxy first serves with no worker (`SERVE_WORKER=false`), so the backlog builds up without
any timing; a restart on the same data with a worker then drains it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.upstream import FakeUpstream
from tests.fakes.upstream.extraction import new_user_texts
from tests.support.hybrid_memory_support import Served
from tests.support.jobs_support import queue_counts, wait_drained
from tests.support.longterm_support import (
    episodic_embedder,
    forwarded_recall,
    memory_fields,
    memory_texts,
)
from tests.support.proxy import Proxy

BOUND = 4
BATCH = 8
TURNS = 30
COURIERS = [f"courier{chr(97 + i % 26)}{chr(97 + i // 26)}zed" for i in range(TURNS)]


@pytest.fixture
def held(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Served]:
    served = Served(
        tmp_path / "data",
        upstream_server[1],
        serve_worker=False,
        job_max_pending_per_token=BOUND,
        job_max_pending=1000,
        job_batch_size=BATCH,
    )
    try:
        yield served
    finally:
        served.drain()


def _say(proxy: Proxy, token: str, text: str, session: str = "s1", user: str = "ada") -> str:
    reply = proxy.chat(
        token,
        headers={"X-Session-Id": session},
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers.get("x-memorybridge-stored") != "false"
    return str(reply.json()["choices"][0]["message"]["content"])


def _metrics(proxy: Proxy) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = httpx.get(f"{proxy.url}/metrics", headers=proxy.admin_headers, timeout=10)
    assert reply.status_code == 200, reply.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }


def _episodic(proxy: Proxy, token_id: int) -> dict[str, int]:
    return queue_counts(proxy.url, proxy.admin_token, token_id).get("episodic", {})


def _with_worker(held: Served) -> None:
    """Serve the same data again, this time draining the queue."""
    settings = held.proxy.settings.model_copy(update={"serve_worker": True})
    held.proxy = dataclasses.replace(held.proxy, settings=settings)
    held.restart()


def test_a_backlog_past_the_bound_is_coalesced_then_indexed_in_batches_and_recalled(
    held: Served, upstream: FakeUpstream
) -> None:
    proxy = held.proxy
    token_id, token = proxy.create_token(**episodic_embedder(proxy.upstream_url))
    for i in range(TURNS):
        _say(proxy, token, f"Parcel {i} travels with {COURIERS[i]}", session=f"s{i % 3}")

    # Every turn answered and stored; only BOUND jobs are scheduled one by one.
    assert _episodic(proxy, token_id) == {"pending": BOUND, "coalesced": TURNS - BOUND}
    seen = _metrics(proxy)
    assert seen[("memorybridge_memory_pending_jobs", (("consumer", "episodic"),))] == TURNS
    assert seen[("memorybridge_memory_freshness_lag_seconds", (("consumer", "episodic"),))] > 0
    past = (
        "memorybridge_jobs_past_bound_total",
        (("consumer", "episodic"), ("outcome", "coalesced")),
    )
    assert seen[past] >= TURNS - BOUND  # the registry is the process's: other tests add to it

    before = len(upstream.requests)
    _with_worker(held)
    proxy = held.proxy
    counts = wait_drained(proxy.url, proxy.admin_token, token_id)
    assert counts["episodic"] == {"done": TURNS}
    indexing = [r for r in upstream.requests[before:] if r.path.endswith("/embeddings")]
    # Each user message and reply embedded once, in a handful of batch calls.
    assert sum(len(r.json["input"]) for r in indexing) == 2 * TURNS
    assert len(indexing) <= -(-TURNS // BATCH) + 1 < TURNS

    after = _metrics(proxy)
    assert after[("memorybridge_memory_pending_jobs", (("consumer", "episodic"),))] == 0
    assert after[("memorybridge_memory_freshness_lag_seconds", (("consumer", "episodic"),))] == 0
    for i in range(TURNS):
        _say(proxy, token, f"What does {COURIERS[i]} carry?", session="later")
        assert f"Parcel {i} travels with {COURIERS[i]}" in forwarded_recall(upstream), i


def test_one_tokens_flood_stays_within_its_bound_and_leaves_another_token_pending(
    held: Served,
) -> None:
    proxy = held.proxy
    flood_id, flood = proxy.create_token(**episodic_embedder(proxy.upstream_url))
    quiet_id, quiet = proxy.create_token(name="quiet", **episodic_embedder(proxy.upstream_url))
    for i in range(3 * BOUND):
        _say(proxy, flood, f"flood message {i}", user=f"user{i % 2}", session=f"f{i}")
        # The token's jobs scheduled one by one never pass the bound, whatever it sends.
        assert _episodic(proxy, flood_id).get("pending", 0) <= BOUND
    assert _episodic(proxy, flood_id) == {"pending": BOUND, "coalesced": 2 * BOUND}
    _say(proxy, quiet, "a quiet message", session="q")
    assert _episodic(proxy, quiet_id) == {"pending": 1}  # its own bound, not the flood's


def test_past_the_overall_bound_every_token_is_coalesced(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    served = Served(
        tmp_path / "data",
        upstream_server[1],
        serve_worker=False,
        job_max_pending_per_token=100,
        job_max_pending=3,
    )
    try:
        proxy = served.proxy
        first_id, first = proxy.create_token(**episodic_embedder(proxy.upstream_url))
        second_id, second = proxy.create_token(name="b", **episodic_embedder(proxy.upstream_url))
        for i in range(3):
            _say(proxy, first, f"first {i}", session=f"a{i}")
        _say(proxy, second, "second", session="b")
        assert _episodic(proxy, first_id) == {"pending": 3}
        assert _episodic(proxy, second_id) == {"coalesced": 1}
    finally:
        served.drain()


def test_past_its_bound_a_tokens_mem0_work_is_deferred_in_order_not_dropped(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    """Mem0's extraction cannot be merged: past the token's bound its jobs wait behind every
    due pending job (`coalesced`), one by one and in their session's order, all of them run, and
    `/metrics` names the token whose backlog it is."""
    served = Served(
        tmp_path / "data",
        upstream_server[1],
        serve_worker=False,
        episodic_memory=False,
        job_max_pending_per_token=BOUND,
        job_max_pending=1000,
    )
    try:
        proxy = served.proxy
        # 128 dimensions: no two of these words share one (Mem0 skips a fact equal to one it has).
        fields = memory_fields(proxy.upstream_url, dims=128)
        flood_id, flood = proxy.create_token(**fields)
        quiet_id, quiet = proxy.create_token(name="quiet", **fields)
        turns = 3 * BOUND
        for i in range(turns):
            _say(proxy, flood, f"Remember {COURIERS[i]}", session=f"s{i % 2}")
        _say(proxy, quiet, "My locker is the blue one", session="q")

        counts = queue_counts(proxy.url, proxy.admin_token, flood_id)
        assert counts["longterm"] == {"pending": BOUND, "coalesced": turns - BOUND}
        assert queue_counts(proxy.url, proxy.admin_token, quiet_id)["longterm"] == {"pending": 1}
        seen = _metrics(proxy)
        deferred = (
            "memorybridge_jobs_past_bound_total",
            (("consumer", "longterm"), ("outcome", "deferred")),
        )
        assert seen[deferred] >= turns - BOUND
        assert seen[("memorybridge_token_open_jobs", (("token_id", str(flood_id)),))] == turns
        assert seen[("memorybridge_token_open_jobs", (("token_id", str(quiet_id)),))] == 1

        before = len(upstream.memory_requests)
        _with_worker(served)
        proxy = served.proxy
        assert wait_drained(proxy.url, proxy.admin_token, flood_id)["longterm"] == {"done": turns}
        texts = memory_texts(proxy, flood_id, user="ada")
        assert texts == {f"Remember {COURIERS[i]}" for i in range(turns)}
        # Each session's extractions ran in its turns' order, deferred or not.
        order = [
            COURIERS.index(text.removeprefix("Remember "))
            for r in upstream.memory_requests[before:]
            for text in new_user_texts(r.json)
            if text.startswith("Remember ")  # the flood's, not the quiet token's
        ]
        assert sorted(order) == list(range(turns))
        for parity in (0, 1):
            mine = [n for n in order if n % 2 == parity]
            assert mine == sorted(mine)
        after = _metrics(proxy)
        assert ("memorybridge_token_open_jobs", (("token_id", str(flood_id)),)) not in after
    finally:
        served.drain()
