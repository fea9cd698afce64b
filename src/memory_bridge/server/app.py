"""The application factory. Every long-lived object is built once, in the lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from memory_bridge.chat.handler import ChatHandler
from memory_bridge.chat.upstream import Upstream, create_session
from memory_bridge.context.template import MemoryTemplate, load_template
from memory_bridge.core import token_count
from memory_bridge.core.heap import freeze_long_lived
from memory_bridge.events.recorder import TurnRecorder
from memory_bridge.http import admin, passthrough_routes
from memory_bridge.http.body_limits import BodyLimits
from memory_bridge.http.edge import EdgeMiddleware
from memory_bridge.http.errors import install_error_handlers
from memory_bridge.http.services import Services, services_of
from memory_bridge.jobs.wiring import create_worker
from memory_bridge.settings import Settings
from memory_bridge.sources.services import open_memory_services
from memory_bridge.storage.health import StorageHealth
from memory_bridge.storage.traces import TraceStore
from memory_bridge.tenancy.ranking import Ranking

log = logging.getLogger(__name__)


def load_templates(settings: Settings) -> dict[str, MemoryTemplate]:
    """Both templates, read up front: a missing one stops the server before it binds."""
    return {
        "en": load_template(settings.memory_template_path),
        "zh": load_template(settings.memory_template_zh_path),
    }


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


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    templates = load_templates(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = await open_memory_services(settings)
        llm_session = create_session(
            timeout=settings.http_timeout,
            connect_timeout=settings.http_connect_timeout,
            max_connections=settings.http_max_connections,
            keepalive_timeout=settings.http_keepalive_timeout,
        )
        upstream = Upstream(llm_session, settings.forwarded_header_names)
        health = StorageHealth()
        recorder = TurnRecorder(runtime.db, settings.max_stored_message_bytes)
        worker = create_worker(runtime) if settings.serve_worker else None
        if worker is not None:
            recorder.on_enqueued(worker.wake)
        traces = TraceStore(
            runtime.db, settings.trace_retention_count, settings.trace_retention_seconds
        )
        app.state.services = Services(
            settings=settings,
            memory=runtime,
            upstream=upstream,
            chat=ChatHandler(
                runtime.sources,
                upstream,
                templates,
                recorder,
                health,
                runtime.audit,
                max_upstream_body=settings.max_upstream_body_bytes,
                ranking=Ranking(memory_token_budget=settings.memory_token_budget),
                traces=traces,
            ),
            traces=traces,
            storage_health=health,
            body_limits=BodyLimits.from_settings(settings),
            worker=worker,
        )
        token_count.load()
        if worker is not None:
            worker.start()
        # Everything built so far lives as long as the server: out of the collector's way.
        freeze_long_lived()
        log.info("MemoryBridge ready")
        try:
            yield
        finally:
            if worker is not None:
                await worker.stop(settings.background_drain_timeout)
            await traces.close()
            await llm_session.close()
            await runtime.close()
            log.info("MemoryBridge stopped")

    app = _EdgeFirst(
        title="MemoryBridge",
        version="0.1.0",
        lifespan=lifespan,
        # The admin API's reference, for the admin token only (the edge checks).
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    install_error_handlers(app)

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        storage = services_of(request).storage_health
        if storage.failing:
            body = {"status": "degraded", "storage": "failing", "error": storage.last_error}
            return JSONResponse(body, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus metrics, for the admin token (the edge checks)."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(passthrough_routes.router)
    app.include_router(admin.router)
    return app
