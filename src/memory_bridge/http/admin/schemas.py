"""What the admin API accepts and answers, declared once for every admin route.

Parameters are validated at the edge of each route, by these shared types, so nothing out of
range reaches the database (a token id beyond its 64-bit integer column used to raise
`OverflowError` there: a 500). The response models and error responses make the OpenAPI schema
(`/openapi.json`) accurate enough to fuzz the API against it; request bodies stay raw
JSON read by the routes themselves (their 422s name the field), so their schemas are documented
through `openapi_extra`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from uuid import UUID

from fastapi import Path, Query, Security
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field

from memory_bridge.core.errors import invalid_request
from memory_bridge.tenancy.config import TokenConfig

# Row ids are signed 64-bit integers in SQLite and PostgreSQL alike; 0 and below are never used.
MAX_DB_ID = 2**63 - 1
MAX_LABEL = 200  # an end user or session id: the chat path's limit too
# No control characters: they never name a user or session the chat path stores, and
# PostgreSQL refuses NUL in text outright.
LABEL_PATTERN = r"^[^\x00-\x1f\x7f]*$"
# Admin JSON bodies are token configs: a few levels deep at most. The bound keeps every
# recursive walk over them (validation, masking) far from Python's recursion limit.
MAX_BODY_DEPTH = 32

TokenId = Annotated[
    int,
    Path(
        ge=1,
        le=MAX_DB_ID,
        description="The token's id (1 to 2^63-1; unknown ids are 404).",
        examples=[3],
    ),
]
# Routed as `{memory_id:uuid}`: Mem0's ids are UUIDs, and anything else (`search` included)
# is then no memory's path at all.
MemoryId = Annotated[
    UUID,
    Path(
        description="A long-term memory's id, as listed.",
        examples=["0b6f6c1e-4f0a-4d2b-9a8e-3c1d2e5f7a90"],
    ),
]
EventCursor = Annotated[
    int, Query(ge=0, le=MAX_DB_ID, description="Only events with a larger id (paging).")
]


# A dependency of every admin router that documents the bearer scheme in the schema (for the
# viewers that read it). It checks nothing itself: the edge authenticates, and
# `require_admin` is the second lock.
ADMIN_BEARER: Any = Security(
    HTTPBearer(
        auto_error=False,
        scheme_name="AdminToken",
        description="The admin token printed by `memory-bridge init`.",
    )
)


def label_query(description: str) -> Any:
    """A bounded, control-character-free string query parameter (user, session, type)."""
    return Query(max_length=MAX_LABEL, pattern=LABEL_PATTERN, description=description)


# ---- responses -------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    type: str = Field(description="OpenAI-style error type, e.g. `not_found_error`.")
    message: str
    code: int = Field(description="The HTTP status, repeated.")
    request_id: str = Field(description="Also in the `X-Request-Id` response header.")


class ErrorResponse(BaseModel):
    """Every error MemoryBridge answers itself, in the OpenAI error shape."""

    error: ErrorDetail


class TokenDetail(BaseModel):
    id: int
    name: str
    created_at: str | None
    updated_at: str | None
    config: dict[str, Any] | None = Field(
        description="The token's config with every secret masked; null if the stored one is bad."
    )
    usable: bool
    config_error: str | None = Field(
        default=None, description="Present when `usable` is false: what is wrong with the config."
    )
    memory_layers: dict[str, str] | None = Field(
        default=None, description="Present when `usable` is true: each memory layer's state."
    )
    reindex: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="Present once a layer was rebuilt or re-embedded: its state, done/total, "
        "the active shard and the one being filled (GET .../rebuild).",
    )


class CreatedToken(TokenDetail):
    token: str = Field(description="The new token's secret, shown only here.")


class TokenList(BaseModel):
    data: list[TokenDetail]


class RotatedToken(BaseModel):
    id: int
    token: str = Field(description="The new secret; the old one stops working at once.")


class EventItem(BaseModel):
    id: int
    type: str
    user: str
    session: str
    request_id: str
    data: dict[str, Any]
    created_at: str | None


class EventList(BaseModel):
    data: list[EventItem]


class MemoryItem(BaseModel):
    id: str
    memory: str
    user: str | None = Field(description='The end user; "" for token-wide memories.')
    created_at: str | None
    updated_at: str | None
    score: float | None = Field(default=None, description="Search results only.")


class SupersededBy(BaseModel):
    id: str | None = None
    text: str | None = None
    learned_at: str | None = None


class SupersededVersion(BaseModel):
    event: str
    at: str
    by_id: str | None = None


class SupersededMemory(BaseModel):
    """A fact a newer one superseded (consolidation): never recalled, restorable."""

    id: str
    user: str | None = None
    text: str | None = None
    learned_at: str | None = None
    superseded_at: str
    superseded_by: SupersededBy
    history: list[SupersededVersion]


class MemoryPage(BaseModel):
    data: list[MemoryItem]
    total: int
    limit: int
    offset: int
    # With `include=superseded`: the facts superseded and not restored since.
    superseded: list[SupersededMemory] | None = None


class MemoryHits(BaseModel):
    data: list[MemoryItem]


_ERROR_DESCRIPTIONS = {
    400: "The body is not JSON.",
    401: "Missing or unknown bearer token.",
    403: "Not the admin token.",
    404: "Unknown token (or memory).",
    408: "The body arrived too slowly.",
    409: "The token cannot do this (no usable config, or the memory layer is off).",
    413: "The body is over the limit.",
    422: "A parameter or the body is invalid; the message names it.",
    502: "The long-term memory backend failed.",
    503: "The token store is unavailable, or too many bodies are being read; retry.",
}
# Every admin route can meet these, whatever it does: the edge answers them.
COMMON_ERRORS = (401, 403, 422, 503)
BODY_ERRORS = (400, 408, 413)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries, in the OpenAI error shape, for these statuses."""
    return {
        code: {"model": ErrorResponse, "description": _ERROR_DESCRIPTIONS[code]}
        for code in sorted({*COMMON_ERRORS, *codes})
    }


# ---- request bodies --------------------------------------------------------------------------

_BODY_RULES = (
    " Strings must not contain NUL characters or lone surrogates, and the body may nest at most "
    f"{MAX_BODY_DEPTH} levels; `memory` is described in docs/configuration.md."
)
# A PATCH may clear these by sending null; the two required fields cannot be cleared.
_REQUIRED = ("name", "llm_base_url")


def _config_schema(partial: bool) -> dict[str, Any]:
    schema = TokenConfig.model_json_schema()
    properties: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        if partial:
            # A PATCH leaves out what it does not change: no defaults apply.
            prop = {key: value for key, value in prop.items() if key != "default"}
            nullable = any(alt.get("type") == "null" for alt in prop.get("anyOf", ()))
            if name not in _REQUIRED and not nullable:
                prop = {"anyOf": [prop, {"type": "null"}]}
        properties[name] = prop
    if not partial:
        return schema
    return {**schema, "properties": properties, "required": [], "title": "TokenConfigPatch"}


def json_body(
    description: str, example: dict[str, Any], *, partial: bool = False
) -> dict[str, Any]:
    """`openapi_extra` documenting a token config body the route reads itself."""
    return {
        "requestBody": {
            "required": True,
            "description": description + _BODY_RULES,
            "content": {
                "application/json": {"schema": _config_schema(partial), "example": example}
            },
        }
    }


def markdown_body(description: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"text/markdown": {"schema": {"type": "string", "pattern": r"^[^\x00]*$"}}},
        }
    }


def parse_json_body(raw: bytes) -> object:
    """An admin request's JSON body, or a 4xx `ProxyError`: never a 500, never half-stored.

    Python's parser recurses (a `RecursionError` near 1,000 levels) and refuses integers of
    more than 4,300 digits with a plain `ValueError`; a lone surrogate escape parses fine but
    cannot be stored, and PostgreSQL refuses NUL in text: all refused here.
    """
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep() from None
    except UnicodeDecodeError:
        raise invalid_request("The request body is not valid UTF-8.") from None
    except ValueError:  # JSONDecodeError, or an integer too long to convert
        raise invalid_request("The request body is not valid JSON.", 400) from None
    _check_json(body)
    return body


def _check_json(body: object) -> None:
    # Iterative: the whole point is not to recurse into what the parser just accepted.
    stack: list[tuple[object, int]] = [(body, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list):
            if depth > MAX_BODY_DEPTH:
                raise _too_deep()
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((value, depth + 1) for value in item.values())
            else:
                stack.extend((value, depth + 1) for value in item)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise invalid_request("The request body holds a NUL character.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_request("The request body holds text that is not valid Unicode.") from None


def _too_deep() -> Exception:
    return invalid_request(f"The request body is nested deeper than {MAX_BODY_DEPTH} levels.")
