"""Ready when ready: `/ready` is 503 while start-up's warm-up runs (the local embedding model,
the vector shards) and 200 once it is over, while `/health` (liveness) and chat answer all
along; what was warmed is reported."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from memory_bridge.embedding.local import local_extra_installed
from memory_bridge.http import readiness
from memory_bridge.server.app import create_app
from tests.fakes.upstream import FakeUpstream
from tests.support.jobs_support import poll, wait_drained
from tests.support.loopback import LoopbackServer
from tests.support.proxy import start_proxy


def _ready(url: str) -> httpx.Response:
    return httpx.get(f"{url}/ready", timeout=30)


def test_ready_waits_for_the_warm_up_and_health_does_not(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    async def held(_runtime: object, _settings: object, state: readiness.Readiness) -> None:
        state.waiting_for = "the local embedding model"
        while not release.is_set():
            await asyncio.sleep(0.01)

    monkeypatch.setattr(readiness, "_warm_model", held)
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1])
    try:
        early = _ready(proxy.url)
        assert early.status_code == 503
        assert early.json() == {"status": "warming", "waiting_for": "the local embedding model"}
        assert httpx.get(f"{proxy.url}/health", timeout=30).status_code == 200
        _, token = proxy.create_token()
        chat = proxy.chat(token, model="m", messages=[{"role": "user", "content": "hi"}])
        assert chat.status_code == 200  # served meanwhile
        release.set()
        poll(lambda: _ready(proxy.url).status_code == 200, "/ready to answer 200")
        assert _ready(proxy.url).json()["status"] == "ready"
    finally:
        release.set()
        server.stop()


@pytest.mark.skipif(not local_extra_installed(), reason="the local extra is not installed")
def test_the_local_model_and_the_shards_are_warmed_at_start_up(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str]
) -> None:
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], episodic_default_embedder="local"
    )
    try:
        poll(lambda: _ready(proxy.url).status_code == 200, "/ready to answer 200")
        warmed = _ready(proxy.url).json()["warmed"]
        assert warmed == {"model": "local:all-MiniLM-L6-v2", "shards": 0}, warmed
        token_id, token = proxy.create_token()
        reply = proxy.chat(token, model="m", messages=[{"role": "user", "content": "I like tea"}])
        assert reply.status_code == 200
        wait_drained(proxy.url, proxy.admin_token, token_id)  # its episodic shard is written
    finally:
        server.stop()
    # Started again on the same data: the token's shard is opened before /ready says 200.
    again = LoopbackServer(create_app(proxy.settings))
    url = again.start()
    try:
        poll(lambda: _ready(url).status_code == 200, "/ready to answer 200 again")
        assert _ready(url).json()["warmed"]["shards"] == 1
    finally:
        again.stop()
