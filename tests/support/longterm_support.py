"""Helpers for the long-term memory (Mem0) integration tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_bridge.http.services import services_of_app
from memory_bridge.server.logs import RequestIdFilter
from memory_bridge.sources.longterm.config import MODEL_PREFIX
from memory_bridge.sources.longterm.pool import Mem0Pool
from memory_bridge.sources.longterm.source import LongTermMemory
from tests.fakes.upstream import FakeUpstream
from tests.support.loopback import LoopbackServer
from tests.support.polling import WAIT as WAIT
from tests.support.polling import wait_until as wait_until
from tests.support.proxy import Proxy, start_proxy

MEMORY_LLM_KEY = "sk-memory-llm-secret-0123456789abcdef"
EMBED_KEY = "sk-embedder-secret-0123456789abcdef"


def memory_fields(upstream_url: str, dims: int = 32, **extra: Any) -> dict[str, Any]:
    """A complete long-term memory config against the fake upstream (bag-of-words vectors)."""
    fields: dict[str, Any] = {
        "memory_llm_provider": "openai",
        "memory_llm_base_url": upstream_url,
        "memory_llm_api_key": MEMORY_LLM_KEY,
        "memory_llm_body": {"model": "fake-memory-llm"},
        "embed_provider": "openai",
        "embed_base_url": upstream_url,
        "embed_api_key": EMBED_KEY,
        "embed_dims": dims,
        "embed_body": {"model": "bow-embed"},
    }
    fields.update(extra)
    return fields


def episodic_embedder(upstream_url: str) -> dict[str, Any]:
    """The token's own embedder (the fake's bag of words) and no memory LLM: episodic memory
    alone, its turns' only after-turn work the episodic index."""
    return {
        "embed_provider": "openai",
        "embed_base_url": upstream_url,
        "embed_api_key": EMBED_KEY,
        "embed_dims": 32,
        "embed_body": {"model": "bow-words"},
    }


def memories(proxy: Proxy, token_id: int, user: str | None = None) -> list[dict[str, Any]]:
    params = {} if user is None else {"user": user}
    reply = proxy.admin("GET", f"/tokens/{token_id}/memories", params=params)
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def memory_texts(proxy: Proxy, token_id: int, user: str | None = None) -> set[str]:
    return {m["memory"] for m in memories(proxy, token_id, user)}


def wait_for_memory(proxy: Proxy, token_id: int, text: str, user: str | None = None) -> None:
    wait_until(lambda: text in memory_texts(proxy, token_id, user), what=f"memory {text!r}")


def forwarded_recall(upstream: FakeUpstream) -> str:
    """The recall block of the last request the proxy forwarded: the user message placed right
    before the latest user message ("" if none; stored history ends with an assistant reply)."""
    messages = upstream.proxied_requests[-1].json["messages"]
    latest = max(i for i, m in enumerate(messages) if m["role"] == "user")
    before = messages[latest - 1] if latest else {}
    return str(before["content"]) if before.get("role") == "user" else ""


@dataclass
class Running:
    """A proxy whose app objects a test may look at (the pool, the vector shards)."""

    server: LoopbackServer
    proxy: Proxy

    @property
    def longterm(self) -> LongTermMemory:
        source: LongTermMemory = services_of_app(self.server.app).memory.longterm
        return source

    @property
    def pool(self) -> Mem0Pool:
        return self.longterm.pool

    def shards(self, token_id: int | None = None) -> list[tuple[int, str, int]]:
        """The Mem0 shards of the embedded engine on disk (of one token): (token, model, dims)."""
        out = []
        for meta in (self.proxy.settings.memory_bridge_data_dir / "vectors").glob("t*/*/meta.json"):
            data = json.loads(meta.read_text())
            if data["model_id"].startswith(MODEL_PREFIX) and token_id in (None, data["token_id"]):
                out.append((data["token_id"], data["model_id"], data["dims"]))
        return sorted(out)


def start(data_dir: Path, upstream_url: str, **overrides: Any) -> Running:
    server, proxy = start_proxy(data_dir, upstream_url, **overrides)
    return Running(server, proxy)


@pytest.fixture
def running(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Running]:
    # Mem0 alone: episodic recall of the raw conversation has tests of its own.
    run = start(tmp_path / "data", upstream_server[1], episodic_memory=False)
    try:
        yield run
    finally:
        run.server.stop()


def memory_block(system: str) -> list[str]:
    """The items of the long-term memory block in a forwarded recall block, each without
    the date label it carries (`[on 2026-03-14] `)."""
    return re.findall(r"^- (?:\[[^\]\n]*\d{4}-\d\d-\d\d\] )?(.*)$", system, flags=re.MULTILINE)


def chat(
    proxy: Proxy, token: str, text: str, user: str | None = None, session: str = "s"
) -> httpx.Response:
    body: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    if user is not None:
        body["user"] = user
    reply = proxy.chat(token, {"X-Session-Id": session}, **body)
    return reply


def with_rid(caplog: pytest.LogCaptureFixture) -> None:
    """Give every captured record the `rid` attribute the production log format prints."""
    caplog.handler.addFilter(RequestIdFilter())
