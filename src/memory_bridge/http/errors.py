"""Errors of our own in the OpenAI error shape, so OpenAI SDKs surface them as such."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import Match

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.request_context import request_id_var

log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
}


def error_body(status: int, type_: str, message: str) -> bytes:
    error = {"type": type_, "message": message, "code": status, "request_id": request_id_var.get()}
    return json.dumps({"error": error}).encode()


def error_response(
    status: int, type_: str, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        error_body(status, type_, message),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")


def _allowed_methods(request: Request) -> str | None:
    """Every method some route serves at this path, for a 405's `Allow`.

    Starlette's router answers 405 from the first route whose path matches, so its `Allow`
    names only that route's methods (`POST` for `/v1/admin/tokens`, which takes GET too). The
    routes are asked, method by method, whether they would take the request.
    """
    allowed = []
    for method in _METHODS:
        probe = {
            "type": "http",
            "method": method,
            "path": request.scope["path"],
            "root_path": request.scope.get("root_path", ""),
            "headers": [],
            "query_string": b"",
            "app": request.app,
        }
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed) if allowed else None


def install_error_handlers(app: FastAPI) -> None:
    async def proxy_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProxyError)
        return error_response(exc.status, exc.type, exc.message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        # Starlette puts a 405's `Allow` (and any other header it means to send) here.
        headers = dict(exc.headers or {})
        if exc.status_code == 405 and (allowed := _allowed_methods(request)):
            headers["Allow"] = allowed
        return error_response(
            exc.status_code, _TYPES.get(exc.status_code, "api_error"), str(exc.detail), headers
        )

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error_response(422, "invalid_request_error", f"{where}: {first.get('msg')}")

    async def unexpected(_: Request, exc: Exception) -> Response:
        log.error("unhandled %s", type(exc).__name__)
        return error_response(500, "internal_error", "Internal error.")

    app.add_exception_handler(ProxyError, proxy_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)


__all__ = ["JSONResponse", "error_body", "error_response", "install_error_handlers"]
