"""Every admin router of the package, found by module name (`http/admin_*routes.py`), so a test
over "all admin routes" cannot miss a router added later."""

from __future__ import annotations

import importlib
import pkgutil

from fastapi import APIRouter

from memory_bridge import http


def admin_routers() -> list[APIRouter]:
    routers = []
    for info in pkgutil.iter_modules(http.__path__):
        if info.name.startswith("admin_") and info.name.endswith("routes"):
            module = importlib.import_module(f"memory_bridge.http.{info.name}")
            router = module.router
            assert isinstance(router, APIRouter)
            routers.append(router)
    return routers


def admin_operations() -> set[str]:
    """`METHOD /path` of every admin route, as the OpenAPI schema names them."""
    return {
        f"{method} {route.path_format}"
        for router in admin_routers()
        for route in router.routes
        for method in getattr(route, "methods", ())
    }
