"""The token field `memory`: curated-only, hybrid (curated + Memory Gateway), or off.

`parse_memory_config(token_config.memory)` turns the raw JSON object into a frozen
`MemoryConfig`, raising `TokenConfigError` (field named like `memory.gateway.topK`) on anything
invalid. Keys may be camelCase or snake_case; an error names the key as the caller spelled it.

No `memory` section (or no `mode`) is *implicit* hybrid: the Gateway layer is used when its
credentials are complete, otherwise the token runs degraded on curated memory alone. An explicit
`"mode": "hybrid"` makes the credentials required. `"curated"` ignores any gateway block.
`"off"` makes the token a plain passthrough: no layer recalls or stores anything.

`placement` ("stable", the default, or "reference_first") and `forge` (the Context Forge's
budget and weights, `tenancy.forge_config`) are read in every mode; parsed once per loaded
config, they cost a request nothing.

The Gateway `userKey` is held as a `SecretStr` and left out of `repr`, and no error message
ever quotes a submitted value, so the key cannot leak through a log line or a 422 body.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memory_bridge.tenancy.errors import TokenConfigError
from memory_bridge.tenancy.forge_config import ForgeConfig, Placement, parse_forge, parse_placement
from memory_bridge.tenancy.longterm_config import DEFAULT as LONGTERM_DEFAULT
from memory_bridge.tenancy.longterm_config import LongTermConfig, parse_longterm

__all__ = [
    "DEFAULT_SCOPE",
    "PASSTHROUGH_STATUS",
    "DegradedWarning",
    "ForgeConfig",
    "GatewayConfig",
    "GatewayScope",
    "MemoryConfig",
    "MemoryMode",
    "Placement",
    "gateway_status",
    "parse_memory_config",
]

log = logging.getLogger(__name__)
G = TypeVar("G", bound="GatewayOptions")

# Every layer's state, in admin details, on a token whose memory is off.
PASSTHROUGH_STATUS = "off (memory.mode 'off': passthrough)"

MemoryMode = Literal["curated", "hybrid", "off"]
GatewayScope = Literal["current_chat", "resources", "all_user_memory"]
# The issue gives no default scope; its example's value is the natural one: this chat's
# memories plus shared resources, without reaching into the user's other conversations.
DEFAULT_SCOPE: tuple[GatewayScope, ...] = ("current_chat", "resources")

_NonEmpty = Annotated[StrictStr, Field(min_length=1, max_length=4096)]

# snake_case (the model's names) → camelCase (the documented spelling).
_GATEWAY_KEYS = {
    "base_url": "baseUrl",
    "user_id": "userId",
    "user_key": "userKey",
    "app_id": "appId",
    "project_id": "projectId",
    "single_end_user": "singleEndUser",
    "scope": "scope",
    "top_k": "topK",
    "timeout_seconds": "timeoutSeconds",
}
_MEMORY_KEYS = {
    "mode": "mode",
    "gateway": "gateway",
    "placement": "placement",
    "forge": "forge",
    "longterm": "longterm",
}
_CREDENTIALS = ("base_url", "user_id", "user_key")


class GatewayOptions(BaseModel):
    """A `gateway` block as given, its credentials possibly missing (an implicit hybrid token
    runs on curated memory alone then): every field that is there is checked all the same,
    so a typo does not hide until the credentials arrive."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: _NonEmpty | None = None
    user_id: _NonEmpty | None = None
    user_key: SecretStr | None = Field(default=None, repr=False)
    app_id: _NonEmpty = "default"
    project_id: _NonEmpty = "default"
    # The operator's statement that the token serves one end user: only then may a search
    # span every conversation of the Gateway user, which all of a token's end users share.
    single_end_user: StrictBool = False
    scope: tuple[GatewayScope, ...] = DEFAULT_SCOPE
    top_k: Annotated[StrictInt, Field(ge=1, le=100)] = 8
    timeout_seconds: float = 10.0

    @field_validator("base_url", "user_id", "app_id", "project_id")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("user_key", mode="before")
    @classmethod
    def _key_is_text(cls, value: object) -> object:
        # Checked before SecretStr wraps it: a non-string or blank key is a config error.
        if not isinstance(value, str | SecretStr):
            raise ValueError("must be a string")
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not text.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL")
        # Credentials in the URL would escape the userKey's masking; a query or fragment would
        # break `{baseUrl}/memories/...`.
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not contain credentials (the Gateway authenticates by userKey)")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        return value.rstrip("/")

    @field_validator("scope", mode="before")
    @classmethod
    def _scope_list(cls, value: object) -> object:
        if not isinstance(value, list | tuple):
            raise ValueError("must be an array")
        if not value:
            raise ValueError("must not be empty")
        if len(set(map(repr, value))) != len(value):
            raise ValueError("must not repeat an entry")
        return tuple(value)

    @field_validator("scope")
    @classmethod
    def _one_user_for_all_memory(
        cls, value: tuple[GatewayScope, ...], info: ValidationInfo
    ) -> tuple[GatewayScope, ...]:
        if "all_user_memory" in value and not info.data.get("single_end_user"):
            raise ValueError(
                "'all_user_memory' searches every conversation of the Gateway user, which all "
                "end users of this token share, so one end user would be served another's "
                "memories; allowed only with singleEndUser: true (the token serves one end user)"
            )
        return value

    @field_validator("timeout_seconds", mode="before")
    @classmethod
    def _timeout(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        if not math.isfinite(value) or value <= 0:
            raise ValueError("must be greater than 0")
        return float(value)


class GatewayConfig(GatewayOptions):
    """Where and as whom the Memory Gateway is reached. Complete and valid by construction."""

    base_url: _NonEmpty
    user_id: _NonEmpty
    user_key: SecretStr = Field(repr=False)


class MemoryConfig(BaseModel):
    """A token's memory layers. `gateway` is None when the Gateway layer is off or degraded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: MemoryMode = "hybrid"
    explicit: bool = False  # False: no `mode` was given, hybrid is implied
    gateway: GatewayConfig | None = None
    # A `gateway` block was given without complete credentials (implicit hybrid): degraded,
    # where no block at all is simply off.
    gateway_incomplete: bool = False
    placement: Placement = "stable"
    forge: ForgeConfig | None = None  # None: the server's defaults
    longterm: LongTermConfig = LONGTERM_DEFAULT

    @model_validator(mode="after")
    def _curated_has_no_gateway(self) -> MemoryConfig:
        if self.mode != "hybrid" and self.gateway is not None:
            raise ValueError(f"{self.mode} mode has no gateway")
        return self

    @property
    def gateway_active(self) -> bool:
        return self.gateway is not None

    @property
    def passthrough(self) -> bool:
        """No memory layer at all: requests are forwarded as they are and nothing is stored."""
        return self.mode == "off"


def gateway_status(cfg: MemoryConfig) -> str:
    """The Gateway layer's state for admin details and the load-time warning."""
    if cfg.gateway is not None:
        return "active"
    if cfg.mode == "off":
        return PASSTHROUGH_STATUS
    if cfg.mode == "curated":
        return "off (curated mode)"
    if not cfg.gateway_incomplete:
        return "off (no gateway configured)"
    return "degraded: no gateway credentials"


class DegradedWarning:
    """Says once per token (per server) that it has no Memory Gateway configured.

    At INFO, as the state it is: most tokens have no Gateway, and a warning for each of them
    read like an error to operators. (The name is kept: `runtime` and the Gateway source use it.)
    """

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def check(self, token_id: int, cfg: MemoryConfig) -> None:
        if cfg.mode == "hybrid" and cfg.gateway is None and token_id not in self._warned:
            self._warned.add(token_id)
            log.info("token %d: no Memory Gateway configured (the gateway layer is off)", token_id)


def parse_memory_config(raw: object) -> MemoryConfig:
    """Validate the token's `memory` field (a JSON object or None); raise TokenConfigError."""
    if raw is None:
        return MemoryConfig()
    if not isinstance(raw, dict):
        raise TokenConfigError("memory", "must be a JSON object")
    values, spelled = _normalize(raw, _MEMORY_KEYS, "memory")

    mode = values.get("mode")
    if mode is not None and mode not in ("curated", "hybrid", "off"):
        raise TokenConfigError("memory.mode", "must be 'curated', 'hybrid' or 'off'")
    placement = parse_placement(
        values.get("placement"), f"memory.{spelled.get('placement', 'placement')}"
    )
    forge = parse_forge(values.get("forge"), f"memory.{spelled.get('forge', 'forge')}", _normalize)
    longterm = parse_longterm(values.get("longterm"), "memory.longterm", _normalize)
    if mode in ("curated", "off"):
        return MemoryConfig(
            mode=mode, explicit=True, placement=placement, forge=forge, longterm=longterm
        )
    explicit = mode == "hybrid"

    block = values.get("gateway")
    prefix = f"memory.{spelled.get('gateway', 'gateway')}"
    if block is None:
        if explicit:
            raise TokenConfigError(prefix, "required when mode is 'hybrid'")
        return MemoryConfig(placement=placement, forge=forge, longterm=longterm)
    if not isinstance(block, dict):
        raise TokenConfigError(prefix, "must be a JSON object")
    gw, gw_spelled = _normalize(block, _GATEWAY_KEYS, prefix)

    def field(name: str) -> str:
        return f"{prefix}.{gw_spelled.get(name, _GATEWAY_KEYS[name])}"

    for name in _CREDENTIALS:
        value = gw.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            if explicit:
                raise TokenConfigError(field(name), "required when mode is 'hybrid'")
            # Implicit hybrid without credentials is a supported setup: curated memory only.
            # The rest of the block is still validated so a typo does not hide until later.
            gw.pop(name, None)
    if not all(name in gw for name in _CREDENTIALS):
        _validate_gateway(gw, field, GatewayOptions)  # what was given, checked all the same
        return MemoryConfig(
            explicit=False,
            gateway_incomplete=True,
            placement=placement,
            forge=forge,
            longterm=longterm,
        )
    return MemoryConfig(
        explicit=explicit,
        gateway=_validate_gateway(gw, field, GatewayConfig),
        placement=placement,
        forge=forge,
        longterm=longterm,
    )


def _normalize(
    raw: dict[Any, Any], keys: dict[str, str], prefix: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Map camel/snake keys to snake names; return the non-null values and each key's spelling."""
    by_camel = {camel: snake for snake, camel in keys.items()}
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in raw.items():
        key = str(key)
        name = key if key in keys else by_camel.get(key)
        if name is None:
            raise TokenConfigError(f"{prefix}.{key}", "unknown field")
        if name in spelled:
            raise TokenConfigError(f"{prefix}.{key}", f"given twice (also as '{spelled[name]}')")
        spelled[name] = key
        if value is not None:  # null means "not given", as in a token PATCH
            values[name] = value
    return values, spelled


def _validate_gateway(values: dict[str, Any], field: Callable[[str], str], model: type[G]) -> G:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        # Only the location and pydantic's fixed message are used: never the submitted input.
        err = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        name, *rest = err["loc"]
        where = field(str(name)) + "".join(f"[{p}]" for p in rest)
        raise TokenConfigError(where, err["msg"].removeprefix("Value error, ")) from None
