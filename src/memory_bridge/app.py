"""The application factory. Every long-lived object is built once, in the lifespan."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from memory_bridge.background import BackgroundWork
from memory_bridge.chat.handler import ChatHandler
from memory_bridge.chat.upstream import Upstream, create_session
from memory_bridge.context.template import MemoryTemplate, load_template
from memory_bridge.heap import freeze_long_lived
from memory_bridge.http import (
    admin_longterm_routes,
    admin_memory_routes,
    admin_routes,
    passthrough_routes,
)
from memory_bridge.http.auth import EdgeMiddleware
from memory_bridge.http.errors import install_error_handlers
from memory_bridge.settings import Settings
from memory_bridge.sources.base import MemorySource
from memory_bridge.sources.curated import CuratedMemory
from memory_bridge.sources.gateway import MemoryGateway
from memory_bridge.sources.history import SessionHistory
from memory_bridge.sources.longterm import LongTermMemory
from memory_bridge.sources.mem0_pool import Mem0Pool, PoolPaths
from memory_bridge.storage.curated import CuratedRepository
from memory_bridge.storage.db import create_engine, create_schema, session_factory
from memory_bridge.storage.events import EventLog
from memory_bridge.storage.sessions import SessionRepository
from memory_bridge.storage.tokens import TokenStore
from memory_bridge.tenancy.memory_config import DegradedWarning

log = logging.getLogger(__name__)


def load_templates(settings: Settings) -> dict[str, MemoryTemplate]:
    """Both templates, read up front: a missing one stops the server before it binds."""
    return {
        "en": load_template(settings.memory_template_path),
        "zh": load_template(settings.memory_template_zh_path),
    }


def prepare_mem0_environment(settings: Settings) -> None:
    """Mem0 reads these when it is first imported (lazily, by the pool): no telemetry, and its
    files under the data directory rather than in the home directory. The local embedder loads
    models from disk only, unless the operator allows the Hugging Face hub explicitly."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(settings.mem0_dir.resolve())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def create_long_term_memory(settings: Settings) -> LongTermMemory:
    pool = Mem0Pool(
        PoolPaths(
            qdrant_path=settings.resolved_qdrant_path,
            qdrant_url=settings.resolved_qdrant_url,
            qdrant_api_key=settings.qdrant_api_key,
            mem0_dir=settings.mem0_dir,
        ),
        threads=settings.memory_threads,
        embed_timeout=settings.memory_search_timeout,
        llm_timeout=settings.memory_store_timeout,
    )
    return LongTermMemory(pool, settings.memory_search_timeout, settings.memory_store_timeout)


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
        engine = create_engine(settings.resolved_database_url)
        await create_schema(engine)
        sessions = session_factory(engine)
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.http_timeout, connect=settings.http_connect_timeout),
            limits=httpx.Limits(
                max_connections=settings.http_max_connections,
                max_keepalive_connections=settings.http_max_keepalive,
            ),
            follow_redirects=False,
        )
        background = BackgroundWork()
        events = EventLog(sessions)
        curated = CuratedRepository(sessions, settings.token_cache_ttl)
        degraded = DegradedWarning()
        prepare_mem0_environment(settings)
        longterm = create_long_term_memory(settings)
        # Order matters only for the system prompt: curated blocks come before the rule.
        sources: tuple[MemorySource, ...] = (
            CuratedMemory(curated),
            SessionHistory(SessionRepository(sessions)),
            MemoryGateway(client, events, degraded),
            longterm,
        )
        llm_session = create_session(
            timeout=settings.http_timeout,
            connect_timeout=settings.http_connect_timeout,
            max_connections=settings.http_max_connections,
        )
        upstream = Upstream(llm_session, settings.forwarded_header_names)
        tokens = TokenStore(sessions, settings.token_cache_ttl)
        tokens.on_change(longterm.pool.invalidate)
        tokens.on_change(curated.forget)
        app.state.settings = settings
        app.state.tokens = tokens
        app.state.longterm = longterm
        app.state.events = events
        app.state.curated = curated
        app.state.degraded_warning = degraded
        app.state.sources = sources
        app.state.upstream = upstream
        app.state.background = background
        app.state.chat = ChatHandler(
            sources,
            upstream,
            templates,
            background,
            settings.memory_store_timeout,
            max_upstream_body=settings.max_upstream_body_bytes,
        )
        # Everything built so far lives as long as the server: out of the collector's way.
        freeze_long_lived()
        log.info("MemoryBridge ready")
        try:
            yield
        finally:
            await background.drain(settings.background_drain_timeout)
            await longterm.pool.close_all(settings.background_drain_timeout)
            await client.aclose()
            await llm_session.close()
            await sessions.close()
            await engine.dispose()
            log.info("MemoryBridge stopped")

    app = _EdgeFirst(
        title="MemoryBridge",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    install_error_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(passthrough_routes.router)
    app.include_router(admin_routes.router)
    app.include_router(admin_memory_routes.router)
    app.include_router(admin_longterm_routes.router)
    return app
