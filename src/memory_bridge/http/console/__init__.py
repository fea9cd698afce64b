"""The console at `/console/`: server-rendered pages (Jinja2, plain forms, no script) served by
the proxy itself, signed in with the admin token (`session`). The edge lets `/console`
through to this cookie auth; everything else keeps its bearer tokens."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from memory_bridge.http.console import (
    auth,
    conversations,
    evolving,
    memories,
    operations,
    overview,
    tokens,
    transfer,
)
from memory_bridge.http.console.session import CsrfRefused, SignInNeeded
from memory_bridge.http.console.views import page, redirect

STATIC = Path(__file__).parent / "static"

router = APIRouter(prefix="/console", include_in_schema=False)
for module in (auth, overview, tokens, transfer, conversations, memories, evolving, operations):
    router.include_router(module.router)


async def _sign_in_needed(request: Request, exc: Exception) -> Response:
    return redirect("/console/login")


async def _csrf_refused(request: Request, exc: Exception) -> Response:
    return page(
        request,
        "error.html",
        None,
        403,
        error="The form was refused: it did not carry this sign-in's CSRF token. Reload the page.",
    )


def install(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    app.include_router(router)
    app.add_exception_handler(SignInNeeded, _sign_in_needed)
    app.add_exception_handler(CsrfRefused, _csrf_refused)
