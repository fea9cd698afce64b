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

import hmac
import logging
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_bridge.core import metrics
from memory_bridge.core.errors import ProxyError
from memory_bridge.core.request_context import new_request_id, request_id_var
from memory_bridge.http import chat_routes, mcp_session, responses_routes
from memory_bridge.http.body_limits import BodyLimits, BodyReader, BodyRefused, content_length
from memory_bridge.http.errors import error_body
from memory_bridge.http.services import services_in
from memory_bridge.storage.tokens import Principal, TokenStore

log = logging.getLogger(__name__)
access_log = logging.getLogger("memory_bridge.access")
OPEN_PATHS = frozenset({"/health", "/ready"})
# The API's schema, and the metrics: served to the admin token only (the metrics also to
# METRICS_TOKEN). `/docs` and everything below it are no longer served (docs/decisions.md, "The
# API reference") but stay admin paths: a service token learns nothing there.
ADMIN_DOC_PATHS = frozenset({"/docs", "/openapi.json", "/metrics"})
ADMIN_DOC_PREFIX = "/docs/"
METRICS_PATH = "/metrics"
ADMIN_PREFIX = "/v1/admin"
# The console signs in with a form and a session cookie: it checks its own requests
# (http/console/session.py), never with a bearer token. Only this prefix: /v1/admin stays
# bearer-only.
CONSOLE_PREFIX = "/console"
# Every console response: no script but our own files (there are none today), no framing, no
# caching of pages that show memory, no referrer leaving with a URL.
CONSOLE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
METRICS_PRINCIPAL = Principal(token_id=0, is_admin=False, config=None)


class Denied(Exception):
    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message


def needs_admin(path: str) -> bool:
    return (
        path in ADMIN_DOC_PATHS
        or path.startswith(ADMIN_DOC_PREFIX)
        or path == ADMIN_PREFIX
        or path.startswith(ADMIN_PREFIX + "/")
    )


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
        status = 500
        extra = [rid_header, *CONSOLE_HEADERS] if is_console(scope["path"]) else [rid_header]

        async def send_with_id(message: Message) -> None:
            nonlocal response_started, status
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        try:
            state = scope.setdefault("state", {})
            state["started"] = started
            state["request_id"] = rid
            path: str = scope["path"]
            principal: Principal | None = None
            if path not in OPEN_PATHS and not is_console(path):
                try:
                    principal = state["principal"] = await authenticate(scope, path)
                    metrics.stage("auth", time.perf_counter() - started)
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
                await self._dispatch(scope, path, reader.receive, send_with_id)
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
            _account(scope, status, time.perf_counter() - started)
            request_id_var.reset(token)

    async def _dispatch(self, scope: Scope, path: str, receive: Receive, send: Send) -> None:
        """The proxied paths are served here, past FastAPI (the hot path); the rest by it."""
        if path == chat_routes.PATH:
            await chat_routes.chat_completions(scope, receive, send)
        elif path == responses_routes.PATH:
            await responses_routes.responses(scope, receive, send)
        elif path.startswith(responses_routes.PREFIX):
            await responses_routes.below_responses(scope, receive, send)
        elif path == mcp_session.PATH:
            # Authenticated above like chat (a service token), the body bounded alike.
            await services_in(scope).mcp.handle_request(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def is_console(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def route_of(path: str) -> str:
    """A bounded name for a path: a metric label never holds what a client typed."""
    if path == chat_routes.PATH:
        return "chat"
    if path == responses_routes.PATH:
        return "responses"
    if path.startswith(responses_routes.PREFIX):
        return "responses_item"
    if path == mcp_session.PATH:
        return "mcp"
    if needs_admin(path):
        return "metrics" if path == METRICS_PATH else "admin"
    if is_console(path):
        return "console"
    if path in OPEN_PATHS:
        return "health"
    return "passthrough" if path.startswith("/v1/") else "other"


def _account(scope: Scope, status: int, seconds: float) -> None:
    """The request's metrics and its access line (one JSON object with LOG_FORMAT=json)."""
    principal = scope.get("state", {}).get("principal")
    token_id = (
        principal.token_id if isinstance(principal, Principal) and principal.token_id else None
    )
    route = route_of(scope["path"])
    metrics.request_done(route, status, token_id, seconds)
    access_log.info(
        "%s %s %d %.1fms",
        scope.get("method", ""),
        route,
        status,
        seconds * 1000,
        extra={
            "request_id": scope.get("state", {}).get("request_id", ""),
            "token_id": token_id,
            "route": route,
            "method": scope.get("method", ""),
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
        },
    )


async def authenticate(scope: Scope, path: str) -> Principal:
    """The principal allowed on `path`, or `Denied`: never a fall-through."""
    secret = _bearer(scope)
    if secret is None:
        raise Denied(401, "authentication_error", "Missing bearer token.")
    services = services_in(scope)
    scraper = services.settings.metrics_token
    if path == METRICS_PATH and scraper and hmac.compare_digest(secret.encode(), scraper.encode()):
        return METRICS_PRINCIPAL
    tokens: TokenStore = services.memory.tokens
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
        raise Denied(403, "permission_error", "The admin token cannot be used for chat or MCP.")
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
