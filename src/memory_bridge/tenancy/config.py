"""A token's configuration: validated hard on the way in, frozen once loaded.

A present string that is empty, an integer that is zero or negative, a body that is not a
JSON object, or an unknown field is an error naming the field; nothing is guessed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from memory_bridge.tenancy.errors import TokenConfigError
from memory_bridge.tenancy.memory_config import MemoryConfig, parse_memory_config

__all__ = ["TokenConfig", "TokenConfigError", "config_secrets", "merge_patch", "validate_config"]

NonEmpty = Annotated[StrictStr, Field(min_length=1, max_length=4096)]
Positive = Annotated[StrictInt, Field(gt=0)]
JsonObject = dict[str, Any]

# Long-term memory (Mem0) is on when these are all set, off when none is; the embedder and its
# size without the memory LLM is episodic memory on the token's own embedder (Mem0 off); any
# other part of it is a 422 naming the missing ones. Keys, base URLs and bodies are optional
# (local servers need neither key nor URL; they mean nothing while the layer is off), except
# that the `openai` provider without a base URL means api.openai.com and needs a key.
MEMORY_REQUIRED = ("memory_llm_provider", "embed_provider", "embed_dims")

# Query parameters that carry a credential (`?key=`, `?api_key=`, `?access_token=`, `?sig=`,
# `?X-Amz-Signature=`...). Other parameters (Azure's `api-version`) are fine.
_CREDENTIAL_PARAM = re.compile(
    r"(^|[-_.])(api-?key|key|token|secret|password|passwd|pwd|sig|signature|auth|"
    r"authorization|credentials?)$|^(apikey|accesstoken|code)$",
    re.IGNORECASE,
)


# The languages of the memory template (templates/memory_template*.md): one list for the
# token config's validation, the server's loading and the settings' paths.
TemplateLanguage = Literal["en", "zh"]
TEMPLATE_LANGUAGES: tuple[TemplateLanguage, ...] = get_args(TemplateLanguage)


class Limits(BaseModel):
    """A token's own limits, enforced before any memory work (`http.token_limits`); each is
    off when absent. The bounds only keep a typo from meaning "unlimited in practice"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent: Annotated[StrictInt, Field(gt=0, le=10_000)] | None = None
    requests_per_minute: Annotated[StrictInt, Field(gt=0, le=1_000_000)] | None = None
    tokens_per_minute: Annotated[StrictInt, Field(gt=0, le=1_000_000_000)] | None = None


class TokenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: NonEmpty
    llm_base_url: NonEmpty
    llm_api_key: NonEmpty | None = None
    session_window_size: Annotated[StrictInt, Field(gt=0, le=1000)] = 20
    memory_limit: Annotated[StrictInt, Field(gt=0, le=100)] = 5
    memory_prompt: NonEmpty | None = None
    memory_llm_provider: NonEmpty | None = None
    memory_llm_base_url: NonEmpty | None = None
    memory_llm_api_key: NonEmpty | None = None
    memory_llm_body: JsonObject | None = None
    embed_provider: NonEmpty | None = None
    embed_base_url: NonEmpty | None = None
    embed_api_key: NonEmpty | None = None
    embed_dims: Positive | None = None
    embed_body: JsonObject | None = None
    template: TemplateLanguage = "en"
    memory: JsonObject | None = None
    limits: Limits | None = None
    _memory_config: MemoryConfig = PrivateAttr(default_factory=MemoryConfig)

    @field_validator(
        "name",
        "llm_base_url",
        "llm_api_key",
        "memory_prompt",
        "memory_llm_provider",
        "memory_llm_base_url",
        "memory_llm_api_key",
        "embed_provider",
        "embed_base_url",
        "embed_api_key",
    )
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("llm_base_url", "memory_llm_base_url", "embed_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http(s) URL")
        # A credential in the URL would be stored and shown unmasked: keys have fields of
        # their own (encrypted at rest, masked in responses). The message never quotes it.
        if "@" in parts.netloc:
            raise ValueError(
                "must not contain credentials (user:password@); use the *_api_key field"
            )
        for name, _ in parse_qsl(parts.query, keep_blank_values=True):
            if _CREDENTIAL_PARAM.search(name):
                raise ValueError(
                    "must not carry a credential in its query; use the *_api_key field"
                )
        return value.rstrip("/")

    @model_validator(mode="after")
    def _memory_block(self) -> TokenConfig:
        # Parsed once, here, before the checks below read it: raises TokenConfigError naming
        # the key, e.g. memory.gateway.userKey.
        self._memory_config = parse_memory_config(self.memory)
        return self

    @model_validator(mode="after")
    def _long_term_memory(self) -> TokenConfig:
        if not any(getattr(self, name) is not None for name in MEMORY_REQUIRED):
            return self
        if self.memory_config.passthrough:
            # Silently ignoring a configured layer would surprise; say which setting wins.
            raise TokenConfigError(
                "memory.mode",
                "'off' turns every memory layer off; remove the long-term memory settings "
                "(" + ", ".join(MEMORY_REQUIRED) + ") or choose another mode",
            )
        # An embedder without a memory LLM is episodic memory with the token's own embedder,
        # long-term (Mem0) off; a memory LLM needs the embedder, and an embedder its size.
        embedder_only = self.memory_llm_provider is None
        needed = MEMORY_REQUIRED[1:] if embedder_only else MEMORY_REQUIRED
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            what = "the embedder" if embedder_only else "long-term memory"
            raise TokenConfigError(
                missing[0], f"{what} is partly configured; missing " + ", ".join(missing)
            )
        providers = [(self.embed_provider, self.embed_base_url, self.embed_api_key, "embed")]
        if not embedder_only:
            llm = self.memory_llm_provider, self.memory_llm_base_url, self.memory_llm_api_key
            providers.insert(0, (*llm, "memory_llm"))
        for provider, base_url, key, label in providers:
            if provider == "openai" and base_url is None and key is None:
                raise TokenConfigError(
                    f"{label}_api_key",
                    f"required with provider 'openai' and no {label}_base_url (api.openai.com)",
                )
        if self.embed_provider == "local" and self.embed_base_url is not None:
            raise TokenConfigError("embed_base_url", "not used by the local embedder")
        return self

    @property
    def memory_config(self) -> MemoryConfig:
        return self._memory_config

    def chat_url(self) -> str:
        return self.api_url("chat/completions")

    def api_url(self, path: str) -> str:
        """`llm_base_url` may be given with or without its `/v1`; both reach `.../v1/<path>`."""
        base = self.llm_base_url
        if not base.endswith("/v1"):
            base += "/v1"
        return f"{base}/{path}"


def validate_config(data: object) -> TokenConfig:
    if not isinstance(data, dict):
        raise TokenConfigError("body", "must be a JSON object")
    try:
        return TokenConfig.model_validate(data)
    except TokenConfigError:
        raise
    except ValidationError as exc:
        # Every field's problem at once (a first-run user should not fix them one per save);
        # the error names the first field, its message lists all of them.
        problems = [_problem(err) for err in exc.errors()]
        if len(problems) == 1:
            raise problems[0] from None
        raise TokenConfigError(
            problems[0].field,
            "; ".join([str(problems[0]).split(": ", 1)[1], *map(str, problems[1:])]),
        ) from None


def _problem(err: Any) -> TokenConfigError:
    if isinstance(cause := (err.get("ctx") or {}).get("error"), TokenConfigError):
        return cause
    field = ".".join(str(p) for p in err["loc"]) or "body"
    message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
    return TokenConfigError(field, message)


def merge_patch(current: TokenConfig, patch: object) -> TokenConfig:
    """Apply a partial update; `null` clears an optional field. Validated like a create."""
    if not isinstance(patch, dict):
        raise TokenConfigError("body", "must be a JSON object")
    merged = current.model_dump(exclude_none=True)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return validate_config(merged)


def config_secrets(config: TokenConfig) -> tuple[str, ...]:
    """Every secret a token's config holds, to scrub from anything that could be shown."""
    from memory_bridge.tenancy.secrets import secret_values

    return tuple(secret_values(config.model_dump(exclude_none=True)))
