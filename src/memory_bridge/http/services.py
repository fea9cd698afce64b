"""The services every route is handed: one frozen object, built once at start-up by the
server (`server/app.py`) and read by the routes through `services_of`, never a bag of
attributes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.applications import Starlette
from starlette.requests import HTTPConnection
from starlette.types import Scope

from memory_bridge.chat.handler import ChatHandler
from memory_bridge.chat.upstream import Upstream
from memory_bridge.http.body_limits import BodyLimits
from memory_bridge.http.mcp_session import McpSession
from memory_bridge.http.readiness import Readiness
from memory_bridge.http.token_limits import TokenLimiter
from memory_bridge.jobs.worker import JobWorker
from memory_bridge.settings import Settings
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.console_sessions import ConsoleSessions
from memory_bridge.storage.health import StorageHealth
from memory_bridge.storage.traces import TraceStore


@dataclass(frozen=True)
class Services:
    settings: Settings
    memory: MemoryServices
    upstream: Upstream
    chat: ChatHandler
    traces: TraceStore
    storage_health: StorageHealth
    body_limits: BodyLimits
    worker: JobWorker | None  # None when `serve` leaves the queue to worker processes
    mcp: McpSession  # `/mcp` (http/mcp), started by the warm-up or its first request
    console_sessions: ConsoleSessions
    limiter: TokenLimiter
    readiness: Readiness


def services_of(request: HTTPConnection) -> Services:
    return cast(Services, request.app.state.services)


def services_in(scope: Scope) -> Services:
    """The same, for the plain ASGI paths (the edge and the chat routes)."""
    return cast(Services, scope["app"].state.services)


def services_of_app(app: Starlette) -> Services:
    """The same, from the application object (tests and tools that hold the app)."""
    return cast(Services, app.state.services)
