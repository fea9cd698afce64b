"""The admin routes' own lock: refused unless the request's principal is the admin token,
even if the edge middleware (not present here) had let a service token through."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send
from tests.support.admin_routers import admin_routers

from memory_bridge.http.errors import install_error_handlers
from memory_bridge.storage.tokens import Principal

SERVICE = Principal(token_id=7, is_admin=False, config=None)
ADMIN = Principal(token_id=1, is_admin=True, config=None)
PATH_VALUES = {"kind": "memory", "memory_id": "0b6f6c1e-4f0a-4d2b-9a8e-3c1d2e5f7a90"}


class _EmptyStore:
    async def list(self) -> list[Any]:
        return []


def _admin_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    for router in admin_routers():
        app.include_router(router)
    # Enough state for one route to answer when the lock opens; no other route gets this far.
    app.state.services = SimpleNamespace(memory=SimpleNamespace(tokens=_EmptyStore(), sources=()))
    return app


class _AsIfTheEdgeLetThrough:
    """Sets the principal the way the edge does, without the edge's own check."""

    def __init__(self, app: ASGIApp, principal: Principal | None) -> None:
        self.app = app
        self.principal = principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.principal is not None:
            scope.setdefault("state", {})["principal"] = self.principal
        await self.app(scope, receive, send)


def _operations() -> list[tuple[str, str]]:
    out = []
    for template, operations in _admin_app().openapi()["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m.group(1), "7"), template)
        out.extend((method.upper(), path) for method in operations)
    return out


OPERATIONS = _operations()


def test_every_admin_route_is_covered() -> None:
    assert len(OPERATIONS) >= 14
    assert ("DELETE", "/v1/admin/tokens/7/memories") in OPERATIONS


@pytest.mark.parametrize("principal", [SERVICE, None], ids=["service-token", "no-principal"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
async def test_a_route_refuses_anything_but_the_admin_principal(
    principal: Principal | None, method: str, path: str
) -> None:
    app = _AsIfTheEdgeLetThrough(_admin_app(), principal)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://admin.test"
    ) as client:
        reply = await client.request(method, path, content=b"{}")
    assert reply.status_code == 403, reply.text
    assert reply.json()["error"]["type"] == "permission_error"


async def test_the_admin_principal_passes_the_lock() -> None:
    # Proves the refusals above come from the lock, not from a route that cannot answer here.
    app = _AsIfTheEdgeLetThrough(_admin_app(), ADMIN)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://admin.test"
    ) as client:
        reply = await client.get("/v1/admin/tokens")
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"data": []}
