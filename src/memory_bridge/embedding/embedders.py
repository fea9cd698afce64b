"""Embeddings for the episodic index, from the token's own embedder configuration.

The same embedder the token gives Mem0 (`embed_*` fields): an OpenAI-compatible embeddings
endpoint called over the shared HTTP client, or the packaged local model run in the bounded
thread pool. A token without one of these (no `embed_*` at all, or a provider we do not call
here) gets the install's default (`EPISODIC_DEFAULT_EMBEDDER`): the packaged local MiniLM where
the `local` extra is installed, else none — a sparse-only (BM25) index, `dims` 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.embedding.local import (
    DEFAULT_DIMS,
    DEFAULT_MODEL,
    LocalModel,
    local_extra_installed,
)
from memory_bridge.tenancy.config import TokenConfig

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
MAX_BATCH = 64
# Providers that speak the OpenAI embeddings API.
OPENAI_STYLE = frozenset({"openai", "openai_structured", "vllm", "lmstudio", "huggingface"})


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

    @property
    def sparse_only(self) -> bool:
        return self.dims == 0

    def to_json(self) -> dict[str, Any]:
        """Everything needed to embed with it again (`api_key` is a secret: seal it)."""
        out: dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            "dims": self.dims,
            "base_url": self.base_url,
            "api_key": self.api_key,
        }
        if self.local is not None:
            out["local"] = {"path": self.local.path, "kwargs_json": self.local.kwargs_json}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EmbedderSpec:
        local = data.get("local")
        return cls(
            provider=str(data["provider"]),
            model=str(data["model"]),
            dims=int(data["dims"]),
            base_url=str(data.get("base_url") or ""),
            api_key=str(data.get("api_key") or ""),
            local=LocalModel(str(local["path"]), str(local["kwargs_json"]))
            if isinstance(local, dict)
            else None,
        )


# No embedder at all: BM25 alone, in a sparse-only shard.
SPARSE_ONLY = EmbedderSpec("none", "bm25", 0)
DEFAULT_EMBEDDERS = ("local", "none")


def default_spec(choice: str) -> EmbedderSpec:
    """The embedder of a token that has none: the packaged MiniLM (`local`, where the extra
    is installed), else BM25 alone."""
    if choice == "local" and local_extra_installed():
        return EmbedderSpec(
            "local", DEFAULT_MODEL, DEFAULT_DIMS, local=LocalModel(path="", kwargs_json="{}")
        )
    return SPARSE_ONLY


def episodic_spec(config: TokenConfig, default: EmbedderSpec) -> EmbedderSpec:
    """The embedder the token's episodic index uses: its own, else the install's default."""
    return embedder_spec(config) or default


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
        """One vector per text; empty ones for a sparse-only spec (nothing to call)."""
        if spec.sparse_only:
            return [[] for _ in texts]
        out: list[list[float]] = []
        for start in range(0, len(texts), MAX_BATCH):
            batch = texts[start : start + MAX_BATCH]
            if spec.local is not None:
                out.extend(await self._local(spec, batch))
            else:
                out.extend(await self._remote(spec, batch))
        return out

    def local_query(self, spec: EmbedderSpec) -> Callable[[str], list[float]] | None:
        """A blocking call embedding one query with a local spec (None for any other), for a
        caller already on a worker thread: recall then embeds and searches in one hop."""
        local = spec.local
        if local is None or spec.sparse_only:
            return None

        def embed(text: str) -> list[float]:
            from memory_bridge.embedding.local import LocalEmbedding

            return LocalEmbedding(local, spec.dims).embed_batch([text])[0]

        return embed

    async def _local(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        from memory_bridge.embedding.local import LocalEmbedding

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
