"""Long-term memory failures: a failed search is a 502 and the upstream is never called; a
failed store leaves the reply alone and is logged (with the request id, without secrets);
a slow embedder never blocks the event loop, and timed-out work never piles up threads."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import closed_port_url
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    chat,
    memory_fields,
    memory_texts,
    start,
    wait_until,
    with_rid,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy

SECRETS = (MEMORY_LLM_KEY, EMBED_KEY, UPSTREAM_KEY)


def _log_text(records: list[logging.LogRecord]) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(r) + repr(r.__dict__) for r in records)


def _assert_memory_502(reply: httpx.Response) -> None:
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert error["type"] == "memory_retrieval_failed"
    # The cause's category follows (test_config_checks.py covers each one).
    assert error["message"].startswith("Memory retrieval failed (longterm: ")
    assert error["request_id"] == reply.headers["x-request-id"]


def test_embedder_error_is_502_and_upstream_not_called(
    proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    _, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.embedding_status = 500
    upstream.embedding_error_body = {"error": {"message": f"bad key {EMBED_KEY}"}}
    reply = chat(proxy, token, "What do I like?")
    _assert_memory_502(reply)
    assert upstream.proxied_requests == []
    assert upstream.embedding_requests  # it was really tried
    text = _log_text(logs.records) + reply.text
    assert "long-term memory search failed" in text
    for secret in SECRETS:
        assert secret not in text


def test_unreachable_embedder_is_502_with_the_sdk_seeing_an_error(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    fields = memory_fields(proxy.upstream_url, embed_base_url=closed_port_url())
    # Saved unchecked: checked, it would be refused (test_config_checks.py).
    body = {"name": "t", "llm_base_url": proxy.upstream_url, **fields}
    created = proxy.admin("POST", "/tokens", json=body, params={"validate": "false"})
    token = created.json()["token"]
    reply = chat(proxy, token, "hello?")
    _assert_memory_502(reply)
    assert upstream.proxied_requests == []
    # An unreachable upstream is a 502 too, but a different error: the two are told apart.
    _, down = proxy.create_token(llm_base_url=closed_port_url())
    other = chat(proxy, down, "hello?")
    assert other.status_code == 502
    assert other.json()["error"]["type"] != "memory_retrieval_failed"


def test_failed_store_leaves_reply_alone_and_is_logged_with_request_id(
    proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    with_rid(logs)
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.memory_responder = lambda texts: Scenario(
        status=401,
        error_body={"error": {"message": f"Incorrect API key provided: {MEMORY_LLM_KEY}"}},
    )
    reply = chat(proxy, token, "Remember that I am vegetarian")
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == "Hello from upstream"
    rid = reply.headers["x-request-id"]
    failure = wait_until(
        lambda: [r for r in logs.records if "longterm.remember failed" in r.getMessage()],
        what="the store failure log",
    )
    assert failure[0].levelno == logging.ERROR
    assert failure[0].rid == rid  # type: ignore[attr-defined]
    assert memory_texts(proxy, token_id) == set()
    # Mem0's own log line about it carries the request id too, and is scrubbed.
    mem0_lines = [r for r in logs.records if r.name.startswith("mem0")]
    assert any(r.rid == rid for r in mem0_lines)  # type: ignore[attr-defined]
    text = _log_text(logs.records)
    assert "***" in text
    for secret in SECRETS:
        assert secret not in text

    # The next turn stores normally.
    upstream.memory_responder = FakeUpstream().memory_responder
    assert chat(proxy, token, "I also like tea").status_code == 200
    wait_until(lambda: "I also like tea" in memory_texts(proxy, token_id))


def test_slow_embedder_does_not_block_the_event_loop(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, slow = proxy.create_token(name="slow", **memory_fields(proxy.upstream_url))
    _, plain = proxy.create_token(name="plain")
    upstream.hold_embeddings()
    result: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: result.append(chat(proxy, slow, "Where do I live?")))
    thread.start()
    try:
        wait_until(lambda: upstream.embedding_requests, what="the search to reach the embedder")
        # While that request waits on the embedder, everything else is served.
        assert httpx.get(f"{proxy.url}/health", timeout=5).status_code == 200
        assert chat(proxy, plain, "hi").status_code == 200
        assert proxy.admin("GET", "/tokens").status_code == 200
        assert thread.is_alive() and not result
    finally:
        upstream.release_embeddings()
        thread.join(30)
    assert result[0].status_code == 200


def test_search_timeout_is_502_and_timed_out_work_does_not_pile_up(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    run = start(tmp_path / "data", upstream_server[1], memory_search_timeout=0.5, memory_threads=2)
    try:
        proxy = run.proxy
        _, token = proxy.create_token(**memory_fields(proxy.upstream_url))
        # Building the instance (and importing Mem0) may outlast this short timeout; the build
        # goes on in the background, so a later request finds it ready.
        wait_until(lambda: chat(proxy, token, "warm up").status_code == 200, what="warm-up")
        upstream.hold_embeddings()
        busy: list[int] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                busy.append(run.pool.executor.busy)
                stop.wait(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(lambda i: chat(proxy, token, f"question {i}"), range(6)))
        for reply in replies:
            _assert_memory_502(reply)
        assert all(
            r.json["messages"][-1]["content"] == "warm up" for r in upstream.proxied_requests
        )
        # Never more threads busy than MEMORY_THREADS, although every caller gave up.
        assert max(busy) <= 2
        upstream.release_embeddings()
        wait_until(lambda: run.pool.executor.busy == 0, what="abandoned calls to finish")
        stop.set()
        watcher.join()
        assert chat(proxy, token, "back to normal").status_code == 200
    finally:
        upstream.release_embeddings()
        run.server.stop()
