"""The admin API's routes, found through its one parent router (`http/admin`): a router that
is not included there is not served, and every router that is, is covered by the tests that
walk "all admin routes"."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from memory_bridge.http import admin


def admin_routers() -> list[APIRouter]:
    return [admin.router]


def admin_operations() -> set[str]:
    """`METHOD /path` of every admin route, as the OpenAPI schema names them (read from an app
    that serves only the admin API: the schema is FastAPI's public view of its routes)."""
    app = FastAPI()
    for router in admin_routers():
        app.include_router(router)
    return {
        f"{method.upper()} {path}"
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
