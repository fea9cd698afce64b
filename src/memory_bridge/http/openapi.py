"""The proxied routes in `/openapi.json`: the chat routes and `/mcp` answer past FastAPI (plain
ASGI, `http/chat_routes.py`), so FastAPI's generated schema does not know them; they are added
here, with the service token that opens them (docs/decisions.md, "The API reference").

Their bodies are the upstream's (OpenAI's) and the MCP protocol's: the schema names what the
proxy itself reads and refuses, and leaves the rest open rather than restating those APIs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

SERVICE_TOKEN = "ServiceToken"
_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "A service token (`mb-…`) made with the admin API: the OpenAI SDK's "
    "`api_key`. The admin token is refused (403) on these routes.",
}
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "code": {"type": "integer"},
                "request_id": {"type": "string"},
            },
        }
    },
}
_ERRORS = {
    "400": "Not JSON, or more messages than MAX_REQUEST_MESSAGES.",
    "401": "No token, or an unknown one.",
    "403": "Not a service token (the admin token).",
    "413": "A body over MAX_REQUEST_BYTES.",
    "422": "Messages or items that are not valid (the field is named).",
    "429": "Over the token's `limits` (with Retry-After).",
    "502": "The upstream (or a memory layer the failure policy makes hard) could not answer.",
}
_SCOPE_HEADERS = [
    {
        "name": "X-User-Id",
        "in": "header",
        "required": False,
        "description": "The end user whose memory is read and written (the body's `user` "
        "wins). None: the token-wide memory.",
        "schema": {"type": "string", "maxLength": 200},
    },
    {
        "name": "X-Session-Id",
        "in": "header",
        "required": False,
        "description": "The session whose history is injected and extended (`default`).",
        "schema": {"type": "string", "maxLength": 200},
    },
]
_PROXY_HEADERS = {
    "X-Request-Id": {"schema": {"type": "string"}, "description": "This request's id."},
    "X-MemoryBridge-Stored": {
        "schema": {"type": "string", "enum": ["false"]},
        "description": "Present when the turn was answered but could not be stored.",
    },
}


def _errors() -> dict[str, Any]:
    shape = {"application/json": {"schema": _ERROR}}
    return {code: {"description": text, "content": shape} for code, text in _ERRORS.items()}


def _proxied(summary: str, description: str, required: list[str]) -> dict[str, Any]:
    body = {
        "type": "object",
        "required": required,
        "properties": {
            "model": {"type": "string"},
            "stream": {"type": "boolean"},
            "user": {"type": "string", "description": "The end user (see X-User-Id)."},
        },
        "additionalProperties": True,
    }
    return {
        "post": {
            "tags": ["proxy"],
            "summary": summary,
            "description": description,
            "operationId": summary.lower().replace(" ", "_"),
            "security": [{SERVICE_TOKEN: []}],
            "parameters": _SCOPE_HEADERS,
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {
                "200": {
                    "description": "The upstream's answer, passed through as it is (any other "
                    "upstream status is passed through too).",
                    "headers": _PROXY_HEADERS,
                    "content": {
                        "application/json": {"schema": {"type": "object"}},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **_errors(),
            },
        }
    }


def proxied_paths() -> dict[str, Any]:
    chat = _proxied(
        "Chat completions",
        "OpenAI's chat completions, with memory placed in the prompt and the turn stored "
        '(docs/configuration.md, "What a request gets").',
        ["model", "messages"],
    )
    chat["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"][
        "messages"
    ] = {"type": "array", "items": {"type": "object", "required": ["role"]}}
    responses = _proxied(
        "Responses",
        "OpenAI's Responses API, with memory placed in the input and the turn stored; paths "
        "below /v1/responses/ pass through for the token's own responses.",
        ["model"],
    )
    mcp = {
        "post": {
            "tags": ["proxy"],
            "summary": "MCP",
            "description": "The memory as MCP tools over the streamable HTTP transport "
            "(JSON-RPC, stateless: docs/mcp.md).",
            "operationId": "mcp",
            "security": [{SERVICE_TOKEN: []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {
                    "description": "The JSON-RPC answer.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **{k: v for k, v in _errors().items() if k in ("401", "403", "413", "429")},
            },
        }
    }
    return {"/v1/chat/completions": chat, "/v1/responses": responses, "/mcp": mcp}


def install(app: FastAPI) -> None:
    """Make `app.openapi()` (what `/openapi.json` serves) list the proxied routes too."""
    generated: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generated()  # FastAPI's, cached on the app from here on
            schema["paths"] = {**proxied_paths(), **schema["paths"]}
            # The passthrough routes (FastAPI's) take the service token too.
            for path in ("/v1/models", "/v1/embeddings"):
                for operation in schema["paths"].get(path, {}).values():
                    operation["security"] = [{SERVICE_TOKEN: []}]
                    operation.setdefault("tags", ["proxy"])
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes[SERVICE_TOKEN] = _SCHEME
        return app.openapi_schema or generated()

    app.openapi = openapi  # type: ignore[method-assign]
