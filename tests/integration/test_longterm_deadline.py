"""A long-term memory search stalled outside HTTP answers 502 within MEMORY_SEARCH_TIMEOUT.

No HTTP timeout helps when the search never reaches the embedder: it may wait for the
token's Mem0 instance to be built, or for one of the MEMORY_THREADS threads. Both waits are
stalled here by holding the pool's vector engine (`_engine_held`: opening a shard waits for
the test), without touching the fake upstream:

- a new token's instance build blocks on opening its shard: a search waits for the build;
- with one memory thread, an admin listing blocked on opening the shard keeps the only thread:
  a search of a ready token waits for a thread.

Each must answer 502 `memory_retrieval_failed` (the upstream never called) while everything
else is served, and the proxy serves the token normally once the stall ends. The client's own
timeout (`SAFETY`, far above the 1 s deadline) turns a search that ignores its deadline into a
failure instead of a hang; no duration is asserted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import (
    Running,
    memory_fields,
    start,
    wait_for_memory,
    wait_until,
)
from tests.support.proxy import Proxy

DEADLINE = 1.0  # MEMORY_SEARCH_TIMEOUT
SAFETY = 20.0  # the client gives up after this: a hang fails the test, never the CI job
SETTLE = 60.0  # bound for a first build (importing Mem0 on a busy machine) to finish


class _GatedEngine:
    """The pool's vector engine, whose `index()` waits while the gate is closed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = threading.Event()

    def index(self, *args: Any) -> Any:
        self.gate.wait(SAFETY)
        return self.inner.index(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextlib.contextmanager
def _engine_held(run: Running) -> Iterator[None]:
    gated = _GatedEngine(run.pool.engine)
    run.pool.engine = gated  # type: ignore[assignment]
    try:
        yield
    finally:
        gated.gate.set()
        run.pool.engine = gated.inner


def _start(tmp_path: Path, upstream_url: str, threads: int) -> Running:
    return start(
        tmp_path / "data",
        upstream_url,
        memory_search_timeout=DEADLINE,
        episodic_memory=False,  # Mem0's stalls alone: episodic recall embeds the query too
        memory_threads=threads,
    )


def _chat(proxy: Proxy, token: str, text: str) -> str:
    """One chat through the openai SDK; its reply text. No answer within `SAFETY` fails the
    test (a stalled search that ignores its deadline would hang until the stall ends)."""
    client = proxy.client(token, timeout=SAFETY)
    try:
        completion = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": text}],
            extra_headers={"X-Session-Id": "deadline"},
        )
    except openai.APITimeoutError:
        pytest.fail(f"no answer within {SAFETY:.0f} s (MEMORY_SEARCH_TIMEOUT is {DEADLINE} s)")
    return completion.choices[0].message.content or ""


def _assert_memory_502(
    proxy: Proxy,
    token: str,
    text: str,
    upstream: FakeUpstream,
    logs: pytest.LogCaptureFixture,
) -> None:
    """The chat fails with the memory 502, because its search ran out of time."""
    logs.clear()
    with pytest.raises(openai.APIStatusError) as caught:
        _chat(proxy, token, text)
    reply = caught.value.response
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert error["type"] == "memory_retrieval_failed"
    assert error["message"].startswith("Memory retrieval failed (longterm")
    assert error["request_id"] == reply.headers["x-request-id"]
    # Stalled before any HTTP: the embedder never saw the query, the upstream never the chat.
    assert not [r for r in upstream.embedding_requests if text in r.body.decode()]
    assert not [r for r in upstream.proxied_requests if text in r.body.decode()]
    # The deadline is what ended it (not some other failure of the stalled stage).
    failures = [
        r.getMessage()
        for r in logs.records
        if r.name == "memory_bridge.sources.longterm.source"
        and r.getMessage().startswith("long-term memory search failed")
    ]
    assert len(failures) == 1 and "TimeoutError" in failures[0], failures


def _warm(proxy: Proxy, token: str) -> None:
    """The token's instance is built (the first search may outlast the short deadline while
    Mem0 is imported; the build goes on in the background)."""

    def served() -> bool:
        try:
            return _chat(proxy, token, "warm up") == "Hello from upstream"
        except openai.APIStatusError:
            return False

    wait_until(served, timeout=SETTLE, what="the token's first successful chat")


def _others_are_served(proxy: Proxy, plain: str) -> None:
    assert httpx.get(f"{proxy.url}/health", timeout=5).status_code == 200
    assert _chat(proxy, plain, "no long-term memory here") == "Hello from upstream"


def test_search_waiting_for_a_stalled_instance_build_is_502_within_its_deadline(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    logs: pytest.LogCaptureFixture,
) -> None:
    # Two threads: the search is not short of a thread, it waits for the build alone.
    run = _start(tmp_path, upstream_server[1], threads=2)
    try:
        proxy = run.proxy
        token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
        _, plain = proxy.create_token(name="plain")
        with _engine_held(run):
            _assert_memory_502(proxy, token, "What do I like?", upstream, logs)
            assert run.pool.current(token_id) is None  # the build really is still waiting
            # A second search joins the same build (one build per token), and gives up too.
            _assert_memory_502(proxy, token, "What do I like, again?", upstream, logs)
            _others_are_served(proxy, plain)
        _warm(proxy, token)  # the build finishes, and the token is served again
        assert run.pool.built == 1
    finally:
        run.server.stop()


def test_search_waiting_for_a_memory_thread_is_502_within_its_deadline(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    logs: pytest.LogCaptureFixture,
) -> None:
    run = _start(tmp_path, upstream_server[1], threads=1)
    try:
        proxy = run.proxy
        token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
        _, plain = proxy.create_token(name="plain")
        _warm(proxy, token)
        # The warm-up turn's memory write (background work in the pool) is done: idle pool.
        wait_for_memory(proxy, token_id, "warm up")
        wait_until(lambda: run.pool.executor.busy == 0, what="an idle pool")

        listing: list[httpx.Response] = []
        lister = threading.Thread(
            target=lambda: listing.append(proxy.admin("GET", f"/tokens/{token_id}/memories"))
        )
        with _engine_held(run):
            # An admin listing takes the only thread and blocks in it on the held engine; it
            # gives up after its own deadline, but the thread (and its slot) stays taken.
            lister.start()
            wait_until(lambda: run.pool.executor.busy == 1, what="the only thread to be taken")
            _assert_memory_502(proxy, token, "Where do I live?", upstream, logs)
            _assert_memory_502(proxy, token, "Where do I live, again?", upstream, logs)
            assert run.pool.executor.busy == 1  # no second thread was started for them
            _others_are_served(proxy, plain)
        lister.join(SAFETY)
        assert listing and listing[0].status_code == 502, listing  # it hit its deadline too
        wait_until(lambda: run.pool.executor.busy == 0, what="the thread to come back")
        assert _chat(proxy, token, "Where do I live now?") == "Hello from upstream"
        assert [r for r in upstream.embedding_requests if "Where do I live now?" in r.body.decode()]
    finally:
        run.server.stop()
