"""The application factory. Every long-lived object is built once, in the lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from memory_bridge.chat.handler import ChatHandler
from memory_bridge.chat.response_claims import ResponseClaims
from memory_bridge.chat.upstream import Upstream, create_session
from memory_bridge.context.template import MemoryTemplate, load_template
from memory_bridge.core import token_count
from memory_bridge.core.heap import freeze_long_lived
from memory_bridge.events.backlog import Bounds
from memory_bridge.events.recorder import TurnRecorder
from memory_bridge.http import admin, console, metrics_route, openapi, passthrough_routes
from memory_bridge.http.body_limits import BodyLimits
from memory_bridge.http.edge import EdgeMiddleware
from memory_bridge.http.errors import install_error_handlers
from memory_bridge.http.mcp_session import McpSession, SessionManager
from memory_bridge.http.readiness import Readiness, warm_up
from memory_bridge.http.services import Services, services_of
from memory_bridge.http.token_limits import TokenLimiter
from memory_bridge.jobs.wiring import create_worker
from memory_bridge.lifecycle.import_staging import sweep_stale
from memory_bridge.settings import Settings
from memory_bridge.sources import summaries
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.sources.services import MemoryServices, open_memory_services
from memory_bridge.storage.console_sessions import ConsoleSessions
from memory_bridge.storage.health import StorageHealth
from memory_bridge.storage.response_owners import ResponseOwners
from memory_bridge.storage.traces import TraceStore
from memory_bridge.tenancy.config import TEMPLATE_LANGUAGES
from memory_bridge.tenancy.ranking import Ranking

log = logging.getLogger(__name__)


def load_templates(settings: Settings) -> dict[str, MemoryTemplate]:
    """Every language's template, read up front: a missing one stops the server before it
    binds."""
    return {lang: load_template(settings.template_path(lang), lang) for lang in TEMPLATE_LANGUAGES}


class _EdgeFirst(FastAPI):
    """FastAPI with the edge middleware in front of its whole stack, not inside it.

    Every response (FastAPI's own errors included) still gets its request id and passes the
    auth check, and the chat path, served by the edge itself, skips FastAPI's layers
    (exception, telemetry and body-limit middleware, routing): it is the hot path.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._edge = EdgeMiddleware(super().__call__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        await self._edge(scope, receive, send)


def _recorder(settings: Settings, memory: MemoryServices) -> TurnRecorder:
    # A turn's summary job is due once its session has been idle that long (sources.summaries).
    delays = {summaries.CONSUMER: settings.summary_idle_seconds}
    # Past the backlog's bounds, the episodic index's jobs are coalesced, the others deferred
    # past their token's own (events.backlog).
    bounds = Bounds(
        per_token=settings.job_max_pending_per_token,
        overall=settings.job_max_pending,
        coalescible=frozenset({EpisodicMemory.name}),
    )
    return TurnRecorder(
        memory.db,
        settings.max_stored_message_bytes,
        delays,
        settings.max_stored_messages_per_turn,
        bounds,
    )


def _chat_handler(
    settings: Settings,
    memory: MemoryServices,
    upstream: Upstream,
    recorder: TurnRecorder,
    health: StorageHealth,
    traces: TraceStore,
) -> ChatHandler:
    return ChatHandler(
        memory.sources,
        upstream,
        load_templates(settings),
        recorder,
        health,
        memory.audit,
        max_upstream_body=settings.max_upstream_body_bytes,
        max_request_messages=settings.max_request_messages,
        parse_in_thread_bytes=settings.parse_in_thread_bytes,
        ranking=Ranking(memory_token_budget=settings.memory_token_budget),
        traces=traces,
        access=memory.access,
        claims=ResponseClaims(ResponseOwners(memory.db)),
    )


def _load_mcp() -> Callable[[], SessionManager]:
    """The MCP endpoint's factory; imports the SDK (~0.4 s), so not before it is needed."""
    from memory_bridge.http.mcp.server import create_session_manager

    return create_session_manager


@asynccontextmanager
async def running_services(settings: Settings) -> AsyncIterator[Services]:
    """Every long-lived object, built once: the memory services, the upstream session, the
    chat handler and (in `serve`) the in-process job worker; closed in reverse order."""
    memory = await open_memory_services(settings)
    # A killed import's staged file holds its plaintext: gone before anything is served.
    stale = sweep_stale(settings.memory_bridge_data_dir / "imports")
    if stale:
        log.info("removed %d staged import(s) left by an import that did not finish", stale)
    llm_session = create_session(
        timeout=settings.http_timeout,
        connect_timeout=settings.http_connect_timeout,
        max_connections=settings.http_max_connections,
        keepalive_timeout=settings.http_keepalive_timeout,
    )
    upstream = Upstream(llm_session, settings.forwarded_header_names)
    health = StorageHealth()
    recorder = _recorder(settings, memory)
    worker = create_worker(memory) if settings.serve_worker else None
    if worker is not None:
        recorder.on_enqueued(worker.wake)
    traces = TraceStore(memory.db, settings.trace_retention_count, settings.trace_retention_seconds)
    chat = _chat_handler(settings, memory, upstream, recorder, health, traces)
    # The MCP SDK's session manager runs (its task group) from its start (the warm-up's or the
    # first /mcp request's) to the end of the app.
    mcp = McpSession(_load_mcp)
    token_count.load()
    if worker is not None:
        worker.start()
    try:
        yield Services(
            settings=settings,
            memory=memory,
            upstream=upstream,
            chat=chat,
            traces=traces,
            storage_health=health,
            body_limits=BodyLimits.from_settings(settings),
            worker=worker,
            mcp=mcp,
            console_sessions=ConsoleSessions(settings.console_session_seconds),
            limiter=TokenLimiter(),
            readiness=Readiness(),
        )
    finally:
        await mcp.close()
        if worker is not None:
            await worker.stop(settings.background_drain_timeout)
        await traces.close()
        await llm_session.close()
        await memory.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    load_templates(settings)  # a missing template fails here, before the server binds

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running_services(settings) as services:
            app.state.services = services
            # Everything built so far lives as long as the server: out of the collector's way.
            freeze_long_lived()
            warming = asyncio.create_task(
                warm_up(services.memory, settings, services.readiness, services.mcp), name="warm-up"
            )
            log.info("MemoryBridge serving (warming up: GET /ready)")
            try:
                yield
            finally:
                warming.cancel()
                await asyncio.gather(warming, return_exceptions=True)
        log.info("MemoryBridge stopped")

    app = _EdgeFirst(
        title="MemoryBridge",
        version="0.1.0",
        lifespan=lifespan,
        # The API's schema, for the admin token only (the edge checks). No /docs page: Swagger
        # UI would load its assets from a CDN (blank offline), and a bearer-only page cannot be
        # opened by a browser anyway (docs/decisions.md, "The API reference").
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        swagger_ui_oauth2_redirect_url=None,
    )
    install_error_handlers(app)
    openapi.install(app)  # the proxied routes (plain ASGI) listed beside FastAPI's

    @app.get("/ready")
    async def ready(request: Request) -> JSONResponse:
        """200 once start-up's warm-up (the local model, vector shards) is over; 503 before."""
        readiness = services_of(request).readiness
        return JSONResponse(readiness.body(), status_code=200 if readiness.ready else 503)

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        storage = services_of(request).storage_health
        if storage.failing:
            body = {"status": "degraded", "storage": "failing", "error": storage.last_error}
            return JSONResponse(body, status_code=503)
        return JSONResponse({"status": "ok"})

    app.include_router(passthrough_routes.router)
    app.include_router(admin.router)
    app.include_router(metrics_route.router)
    console.install(app)
    return app
