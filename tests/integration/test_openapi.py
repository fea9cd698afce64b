"""`/openapi.json` lists every route a client calls, the proxied ones (plain ASGI, past
FastAPI) included, each with the token that opens it; and no `/docs` page is served (Swagger
UI's assets would come from a CDN: docs/decisions.md, "The API reference")."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import Proxy


def _schema(proxy: Proxy) -> dict[str, Any]:
    reply = httpx.get(f"{proxy.url}/openapi.json", headers=proxy.admin_headers, timeout=30)
    assert reply.status_code == 200, reply.text
    schema: dict[str, Any] = reply.json()
    return schema


def test_the_schema_lists_the_proxied_routes_with_the_service_token(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    schema = _schema(proxy)
    schemes = schema["components"]["securitySchemes"]
    assert (schemes["ServiceToken"]["type"], schemes["ServiceToken"]["scheme"]) == (
        "http",
        "bearer",
    )
    for path in ("/v1/chat/completions", "/v1/responses", "/mcp"):
        operation = schema["paths"][path]["post"]
        assert operation["security"] == [{"ServiceToken": []}], path
        assert {"401", "403", "413"} <= set(operation["responses"]), path
    for path, method in (("/v1/models", "get"), ("/v1/embeddings", "post")):
        assert schema["paths"][path][method]["security"] == [{"ServiceToken": []}], path
    chat = schema["paths"]["/v1/chat/completions"]["post"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["required"]) == {"model", "messages"}
    assert {p["name"] for p in chat["parameters"]} == {"X-User-Id", "X-Session-Id"}
    # The admin routes keep the admin token's scheme.
    tokens = schema["paths"]["/v1/admin/tokens"]["get"]
    assert tokens["security"] == [{"AdminToken": []}]

    # What the schema says is what the proxy does: the service token opens chat, the admin
    # token does not.
    _, token = proxy.create_token()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for bearer, status in ((token, 200), (proxy.admin_token, 403)):
        reply = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=30,
        )
        assert reply.status_code == status


def test_no_docs_page_is_served(proxy: Proxy) -> None:
    """Nothing that would load Swagger UI from a CDN: not to the admin token, and a service
    token learns nothing there either."""
    for path in ("/docs", "/docs/oauth2-redirect"):
        assert httpx.get(f"{proxy.url}{path}", headers=proxy.admin_headers).status_code == 404
    _, token = proxy.create_token()
    refused = httpx.get(f"{proxy.url}/docs", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 403
