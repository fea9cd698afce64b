"""The edge middleware: a request id for every request, and authentication.

Pure ASGI (no BaseHTTPMiddleware) so streaming bodies and the client's disconnect signal pass
through untouched and the hot path stays short: the chat path goes from here straight to its
plain ASGI endpoint, everything else on to FastAPI. Auth never fails open: anything but `/health`
needs a known token of the right kind.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_bridge.http import chat_routes
from memory_bridge.http.errors import error_body
from memory_bridge.request_context import new_request_id, request_id_var
from memory_bridge.storage.tokens import Principal, TokenStore

log = logging.getLogger(__name__)
OPEN_PATHS = frozenset({"/health"})
ADMIN_PREFIX = "/v1/admin"


class EdgeMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        rid = new_request_id()
        token = request_id_var.set(rid)
        rid_header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), rid_header]
            await send(message)

        try:
            state = scope.setdefault("state", {})
            state["started"] = started
            state["request_id"] = rid
            path: str = scope["path"]
            if path not in OPEN_PATHS:
                denied = await self._authenticate(scope, path)
                if denied is not None:
                    await _reject(send_with_id, *denied)
                    return
            if path == chat_routes.PATH:
                await chat_routes.chat_completions(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)

    async def _authenticate(self, scope: Scope, path: str) -> tuple[int, str, str] | None:
        secret = _bearer(scope)
        if secret is None:
            return 401, "authentication_error", "Missing bearer token."
        tokens: TokenStore = scope["app"].state.tokens
        principal = await tokens.authenticate(secret)
        if principal is None:
            return 401, "authentication_error", "Unknown or unusable token."
        wants_admin = path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")
        if wants_admin and not principal.is_admin:
            return 403, "permission_error", "This endpoint needs the admin token."
        if not wants_admin and principal.is_admin:
            return 403, "permission_error", "The admin token cannot be used for chat."
        scope["state"]["principal"] = principal
        return None


def principal_of(scope: Scope) -> Principal:
    principal: Principal = scope["state"]["principal"]
    return principal


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            secret = str(secret).strip()
            if scheme.lower() == "bearer" and secret:
                return secret
            return None
    return None


async def _reject(send: Send, status: int, type_: str, message: str) -> None:
    body = error_body(status, type_, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
