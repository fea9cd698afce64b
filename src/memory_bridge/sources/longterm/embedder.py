"""The embedder and LLM clients a Mem0 instance is given.

- A local model: the process-wide `LocalEmbedding` (`sources.local_embedder`) is set as the
  instance's public `embedding_model` (Mem0's own `huggingface` embedder would load a copy of
  the model per instance); the instance is built with `PLACEHOLDER` as its configured embedder,
  whose client is never called.
- A provider: Mem0 builds its own embedder from the token's block (`config.build_spec`, which
  also decides whether the API is told the vector size). Its OpenAI client, and the memory
  LLM's, get a finite timeout and one retry (`bound_clients`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from memory_bridge.sources.longterm.config import NO_KEY, Mem0Spec

__all__ = ["PLACEHOLDER", "bind", "close_clients", "embedder_block"]

# The embedder a Mem0 instance is built with when a local model replaces it: never called.
PLACEHOLDER: dict[str, Any] = {
    "provider": "openai",
    "config": {"api_key": NO_KEY, "openai_base_url": "http://127.0.0.1:9/v1"},
}


def embedder_block(spec: Mem0Spec) -> dict[str, Any]:
    """The embedder block of the instance's Mem0 config."""
    if spec.embedder is not None:
        return spec.embedder
    return {**PLACEHOLDER, "config": {**PLACEHOLDER["config"], "embedding_dims": spec.dims}}


def bind(memory: Any, spec: Mem0Spec, embed_timeout: float, llm_timeout: float) -> None:
    """Give a built instance its embedder and bounded clients (public attributes only)."""
    if spec.local_model is not None:
        from memory_bridge.embedding.local import LocalEmbedding

        memory.embedding_model = LocalEmbedding(spec.local_model, spec.dims)
    else:
        _bound_client(memory.embedding_model, spec.embedder, embed_timeout)
    _bound_client(memory.llm, spec.llm, llm_timeout)


def close_clients(memory: Any) -> None:
    """The HTTP clients of an instance's LLM and embedder (errors ignored: it is going)."""
    for component in (getattr(memory, "llm", None), getattr(memory, "embedding_model", None)):
        close = getattr(getattr(component, "client", None), "close", None)
        if callable(close):
            with contextlib.suppress(Exception):  # best effort: it is going anyway
                close()


def _bound_client(component: Any, block: dict[str, Any] | None, timeout: float) -> None:
    """Give an OpenAI-client-based component a finite timeout and one retry (the SDK default
    is 10 minutes and two retries, which would hold a pool thread far beyond our own timeouts).
    The `openai` provider's client is rebuilt from the token's values alone: Mem0 would
    otherwise let OPENAI_BASE_URL / OPENROUTER_API_KEY from the server environment redirect it.
    """
    import openai

    client = getattr(component, "client", None)
    if not isinstance(client, openai.OpenAI):
        return
    if block is not None and block.get("provider") == "openai":
        config = block.get("config") or {}
        component.client = openai.OpenAI(
            api_key=str(config.get("api_key") or NO_KEY),
            base_url=str(config.get("openai_base_url") or "https://api.openai.com/v1"),
            timeout=timeout,
            max_retries=1,
        )
    else:
        component.client = client.with_options(timeout=timeout, max_retries=1)
