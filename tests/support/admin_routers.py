"""The admin API's routes, found through its one parent router (`http/admin`): a router that
is not included there is not served, and every router that is, is covered by the tests that
walk "all admin routes"."""

from __future__ import annotations

from fastapi import APIRouter

from memory_bridge.http import admin


def admin_routers() -> list[APIRouter]:
    return [admin.router]


def admin_operations() -> set[str]:
    """`METHOD /path` of every admin route, as the OpenAPI schema names them."""
    return {
        f"{method} {route.path_format}"
        for router in admin_routers()
        for route in router.routes
        for method in getattr(route, "methods", ())
    }
