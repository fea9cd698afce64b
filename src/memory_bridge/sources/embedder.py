"""Embeddings for the episodic index, from the token's own embedder configuration.

The same embedder the token gives Mem0 (`embed_*` fields): an OpenAI-compatible embeddings
endpoint called over the shared HTTP client, or the packaged local model run in the bounded
thread pool. Other providers have no episodic index (documented): the index would need a second
client library per provider for little gain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from memory_bridge.sources.blocking import BlockingExecutor
from memory_bridge.sources.mem0_config import OPENAI_STYLE, LocalModel
from memory_bridge.tenancy.config import TokenConfig

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
MAX_BATCH = 64


class EmbedderError(Exception):
    """The embedder failed; the message names the category, never a secret."""


@dataclass(frozen=True, slots=True)
class EmbedderSpec:
    provider: str
    model: str  # the model id, also the shard's model id
    dims: int
    base_url: str = ""
    api_key: str = field(default="", repr=False)
    local: LocalModel | None = None

    @property
    def model_id(self) -> str:
        return f"{self.provider}:{self.model}"


def embedder_spec(config: TokenConfig) -> EmbedderSpec | None:
    """The token's embedder for the episodic index, or None when it has none we can call."""
    provider, dims = config.embed_provider, config.embed_dims
    if provider is None or dims is None:
        return None
    body: dict[str, Any] = dict(config.embed_body or {})
    if provider == "local":
        model = str(body.get("model") or "")
        kwargs = body.get("model_kwargs") or {}
        local = LocalModel(path=model, kwargs_json=json.dumps(kwargs, sort_keys=True))
        return EmbedderSpec("local", model or "all-MiniLM-L6-v2", dims, local=local)
    if provider not in OPENAI_STYLE:
        return None
    base = (config.embed_base_url or "https://api.openai.com/v1").rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    model = str(body.get("model") or DEFAULT_OPENAI_MODEL)
    return EmbedderSpec(provider, model, dims, base_url=base, api_key=config.embed_api_key or "")


class Embedders:
    def __init__(self, client: httpx.AsyncClient, executor: BlockingExecutor) -> None:
        self._client = client
        self._executor = executor

    async def embed(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), MAX_BATCH):
            batch = texts[start : start + MAX_BATCH]
            if spec.local is not None:
                out.extend(await self._local(spec, batch))
            else:
                out.extend(await self._remote(spec, batch))
        return out

    async def _local(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        from memory_bridge.sources.local_embedder import LocalEmbedding

        local = spec.local
        assert local is not None
        return await self._executor.run(lambda: LocalEmbedding(local, spec.dims).embed_batch(texts))

    async def _remote(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        headers = {"authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
        payload = {"model": spec.model, "input": texts, "dimensions": spec.dims}
        try:
            reply = await self._client.post(
                f"{spec.base_url}/embeddings", json=payload, headers=headers
            )
        except httpx.TimeoutException:
            raise EmbedderError("embedder_timeout") from None
        except httpx.HTTPError:
            raise EmbedderError("embedder_unreachable") from None
        if reply.status_code != 200:
            raise EmbedderError(f"embedder_error_{reply.status_code}")
        try:
            data = sorted(reply.json()["data"], key=lambda d: d["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (ValueError, KeyError, TypeError):
            raise EmbedderError("embedder_invalid_reply") from None
        if len(vectors) != len(texts) or any(len(v) != spec.dims for v in vectors):
            raise EmbedderError("embedder_wrong_size")
        return vectors
