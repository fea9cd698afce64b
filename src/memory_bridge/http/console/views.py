"""Rendering the console: one Jinja2 environment with autoescape on for every template, so
memory content (written by end users and LLMs) is text on the page, never markup."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from memory_bridge.http.services import services_of
from memory_bridge.storage.console_sessions import ConsoleSession

PAGE = 50  # rows per page of every list
PICKER_TOKENS = 500  # tokens offered by a page's token picker (the Tokens page pages them all)
MAX_OFFSET = 1_000_000

ENV = Environment(
    loader=PackageLoader("memory_bridge.http.console", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)[:19].replace("T", " ")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


ENV.filters["when"] = _when
ENV.filters["pretty"] = _pretty
ENV.filters["num"] = _num


def page(
    request: Request,
    template: str,
    session: ConsoleSession | None,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    html = ENV.get_template(template).render(
        csrf=session.csrf if session is not None else "",
        signed_in=session is not None,
        path=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


async def token_choices(request: Request) -> list[dict[str, Any]]:
    """The tokens for a page's token picker (service tokens only)."""
    records = await services_of(request).memory.tokens.list(PICKER_TOKENS)
    return [{"id": r.id, "name": r.name} for r in records if not r.is_admin]


def offset_of(request: Request) -> int:
    raw = request.query_params.get("offset", "0")
    return min(int(raw), MAX_OFFSET) if raw.isdigit() else 0
