"""The edge middleware: a request id for every request, bounded request bodies, authentication.

Pure ASGI (no BaseHTTPMiddleware) so streaming bodies and the client's disconnect signal pass
through untouched and the hot path stays short: the chat path goes from here straight to its
plain ASGI endpoint, everything else on to FastAPI.

Authentication denies by construction: `authenticate` returns a principal of the kind the path
needs or raises `Denied`, and anything unexpected on the way (the token store down included) is
a denial too, answered in the OpenAI error shape with the request id. Admin routes check the
principal again through `require_admin`, so a slip here alone cannot open them.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.request_context import new_request_id, request_id_var
from memory_bridge.http import chat_routes, responses_routes
from memory_bridge.http.body_limits import BodyLimits, BodyReader, BodyRefused, content_length
from memory_bridge.http.errors import error_body
from memory_bridge.http.services import services_in
from memory_bridge.storage.tokens import Principal, TokenStore

log = logging.getLogger(__name__)
OPEN_PATHS = frozenset({"/health", "/ready"})
# The admin API's own reference, and the metrics: served to the admin token only.
ADMIN_DOC_PATHS = frozenset({"/docs", "/openapi.json", "/metrics"})
ADMIN_PREFIX = "/v1/admin"


class Denied(Exception):
    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message


def needs_admin(path: str) -> bool:
    return path in ADMIN_DOC_PATHS or path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")


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
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                message["headers"] = [*message.get("headers", []), rid_header]
            await send(message)

        try:
            state = scope.setdefault("state", {})
            state["started"] = started
            state["request_id"] = rid
            path: str = scope["path"]
            principal: Principal | None = None
            if path not in OPEN_PATHS:
                try:
                    principal = state["principal"] = await authenticate(scope, path)
                except Denied as denied:
                    await _reject(send_with_id, denied.status, denied.type, denied.message)
                    return
            services = services_in(scope)
            limited = principal.config.limits if principal and principal.config else None
            declared = content_length(scope)
            if limited is not None and principal is not None:
                try:
                    services.limiter.admit(principal.token_id, limited, declared)
                except ProxyError as refused:
                    await _reject(send_with_id, 429, refused.type, refused.message, refused.headers)
                    return
            limits: BodyLimits = services.body_limits
            reader = BodyReader(limits, scope, receive)
            try:
                if path == chat_routes.PATH:
                    await chat_routes.chat_completions(scope, reader.receive, send_with_id)
                elif path == responses_routes.PATH:
                    await responses_routes.responses(scope, reader.receive, send_with_id)
                elif path.startswith(responses_routes.PREFIX):
                    await responses_routes.below_responses(scope, reader.receive, send_with_id)
                else:
                    await self.app(scope, reader.receive, send_with_id)
            except BodyRefused as refused:
                # Raised by the reader wherever the body was being read; the app had no answer.
                if response_started:
                    raise
                await _reject(send_with_id, refused.status, refused.type, refused.message)
            finally:
                reader.release()
                if limited is not None and principal is not None:
                    unannounced = reader.read_bytes if declared is None else 0
                    services.limiter.release(principal.token_id, unannounced)
        finally:
            request_id_var.reset(token)


async def authenticate(scope: Scope, path: str) -> Principal:
    """The principal allowed on `path`, or `Denied`: never a fall-through."""
    secret = _bearer(scope)
    if secret is None:
        raise Denied(401, "authentication_error", "Missing bearer token.")
    tokens: TokenStore = services_in(scope).memory.tokens
    try:
        principal = await tokens.authenticate(secret)
    except Exception as exc:
        # The class only: the store's message could quote a row.
        log.error("token store failed during authentication: %s", type(exc).__name__)
        raise Denied(
            503, "service_unavailable", "The token store is unavailable; try again."
        ) from None
    if principal is None:
        raise Denied(401, "authentication_error", "Unknown or unusable token.")
    wants_admin = needs_admin(path)
    if wants_admin and not principal.is_admin:
        raise Denied(403, "permission_error", "This endpoint needs the admin token.")
    if not wants_admin and (principal.is_admin or principal.config is None):
        raise Denied(403, "permission_error", "The admin token cannot be used for chat.")
    return principal


def principal_of(scope: Scope) -> Principal:
    principal: Principal = scope["state"]["principal"]
    return principal


def require_admin(request: Request) -> Principal:
    """FastAPI dependency of every admin router: the second lock behind the edge."""
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal) or not principal.is_admin:
        raise ProxyError(403, "permission_error", "This endpoint needs the admin token.")
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


async def _reject(
    send: Send, status: int, type_: str, message: str, extra: tuple[tuple[str, str], ...] = ()
) -> None:
    body = error_body(status, type_, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status in (408, 413, 503):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
