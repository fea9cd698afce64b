"""The memory services `serve`, `worker` and the CLI share, built once: the database, the
vector engine, the token store and every memory source.

A memory source is registered here, in `open_memory_services`, and nowhere else: the chat
handler recalls from `sources`, and the job worker (`jobs/wiring.py`) remembers through the
ones whose work runs after the turn.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.embedding import local as local_embedder
from memory_bridge.embedding.embedders import Embedders, default_spec
from memory_bridge.events.curated import CuratedRepository
from memory_bridge.settings import Settings
from memory_bridge.sources.base import MemorySource
from memory_bridge.sources.curated import CuratedMemory
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.sources.gateway import MemoryGateway
from memory_bridge.sources.history import SessionHistory
from memory_bridge.sources.longterm.events import FactLog
from memory_bridge.sources.longterm.pool import Mem0Pool
from memory_bridge.sources.longterm.source import LongTermMemory
from memory_bridge.sources.vector_generations import Generations
from memory_bridge.storage.access import AccessStats
from memory_bridge.storage.audit import AuditLog
from memory_bridge.storage.db import Database, create_engine, create_schema, session_factory
from memory_bridge.storage.sessions import SessionRepository
from memory_bridge.storage.tokens import TokenStore
from memory_bridge.tenancy import encryption
from memory_bridge.tenancy.memory_config import DegradedWarning
from memory_bridge.tenancy.private_files import private_dir
from memory_bridge.vectors.index import VectorEngine
from memory_bridge.vectors.optimizer import ShardOptimizer

log = logging.getLogger(__name__)


def prepare_mem0_environment(settings: Settings) -> None:
    """Mem0 reads these when it is first imported (lazily, by the pool): no telemetry, and its
    files under the data directory rather than in the home directory. The local embedder loads
    models from disk only, unless the operator allows the Hugging Face hub explicitly."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(settings.mem0_dir.resolve())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    local_embedder.use_runtime(settings.local_embedder_runtime)


def load_cipher(settings: Settings) -> encryption.SecretCipher:
    """The key of the provider keys in token configs (`MEMORY_BRIDGE_SECRET_KEY`, else the key
    file, made if missing); the data directory that holds the file is made owner-only first."""
    private_dir(settings.memory_bridge_data_dir)
    return encryption.load_cipher(
        settings.memory_bridge_secret_key, settings.resolved_secret_key_path
    )


def create_long_term_memory(
    settings: Settings, vectors: VectorEngine, db: Database | None
) -> LongTermMemory:
    """Mem0's facts, with their vectors in `vectors` (the engine episodic memory uses too)."""
    pool = Mem0Pool(
        vectors,
        settings.mem0_dir,
        threads=settings.memory_threads,
        embed_timeout=settings.memory_search_timeout,
        llm_timeout=settings.memory_store_timeout,
        secrets=(settings.qdrant_api_key,) if settings.qdrant_api_key else (),
        max_instances=settings.mem0_max_instances,
    )
    return LongTermMemory(
        pool, settings.memory_search_timeout, settings.memory_store_timeout, FactLog(db)
    )


def open_vector_engine(settings: Settings) -> VectorEngine:
    """The engine of the episodic index and of Mem0's facts: Qdrant Edge shards under the data
    directory (one process owns them), or the Qdrant server named by QDRANT_URL."""
    if settings.qdrant_path is not None:
        log.warning(
            "QDRANT_PATH is deprecated and ignored: vectors live in the vector engine "
            "(<data dir>/vectors, or QDRANT_URL); memories stored under %s are not read",
            settings.qdrant_path,
        )
    if settings.resolved_qdrant_url:
        from memory_bridge.vectors.server import ServerEngine

        return ServerEngine.connect(
            settings.resolved_qdrant_url, api_key=settings.qdrant_api_key or None
        )
    from memory_bridge.vectors.edge import EdgeEngine

    return EdgeEngine(
        settings.memory_bridge_data_dir,
        min_free_bytes=settings.vector_min_free_mb << 20,
        max_open=settings.vector_max_open_shards,
    )


def _episodic(
    settings: Settings,
    vectors: VectorEngine,
    client: httpx.AsyncClient,
    threads: BlockingExecutor,
    generations: Generations,
) -> EpisodicMemory:
    return EpisodicMemory(
        vectors,
        Embedders(client, threads),
        threads,
        settings.memory_search_timeout,
        settings.memory_store_timeout,
        enabled=settings.episodic_memory,
        default_embedder=default_spec(settings.episodic_default_embedder),
        generations=generations,
    )


@dataclass(frozen=True)
class MemoryServices:
    settings: Settings
    engine: AsyncEngine
    db: Database
    client: httpx.AsyncClient
    tokens: TokenStore
    audit: AuditLog
    curated: CuratedRepository
    degraded: DegradedWarning
    longterm: LongTermMemory
    vectors: VectorEngine
    vector_threads: BlockingExecutor
    sources: tuple[MemorySource, ...]
    episodic: EpisodicMemory | None = None
    generations: Generations | None = None
    optimizer: ShardOptimizer | None = None
    # When recalled memories were last injected (fading); None where nothing injects.
    access: AccessStats | None = None

    async def close(self) -> None:
        if self.access is not None:
            await self.access.close()
        await self.longterm.pool.close_all(self.settings.background_drain_timeout)
        await self.vector_threads.shutdown(self.settings.background_drain_timeout)
        if self.optimizer is not None:
            self.optimizer.close()
        self.vectors.close()
        await self.client.aclose()
        await self.db.close()
        await self.engine.dispose()


async def open_memory_services(settings: Settings) -> MemoryServices:
    engine = create_engine(settings.resolved_database_url)
    await create_schema(engine)
    db = session_factory(engine)
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(settings.http_timeout, connect=settings.http_connect_timeout),
        limits=httpx.Limits(
            max_connections=settings.http_max_connections,
            max_keepalive_connections=settings.http_max_keepalive,
        ),
        follow_redirects=False,
    )
    audit = AuditLog(db)
    curated = CuratedRepository(db, settings.token_cache_ttl)
    degraded = DegradedWarning()
    prepare_mem0_environment(settings)
    optimizer = ShardOptimizer(settings.vector_optimize_threshold)
    vectors = optimizer.track(open_vector_engine(settings))
    longterm = create_long_term_memory(settings, vectors, db)
    vector_threads = BlockingExecutor(settings.memory_threads, "vectors")
    cipher = load_cipher(settings)
    generations = Generations(db, cipher, settings.token_cache_ttl)
    longterm.use_generations(generations)  # Mem0 on its layer's active shard generation
    episodic = _episodic(settings, vectors, client, vector_threads, generations)
    # Order matters only for the system prompt: curated blocks come before the rule.
    sources: tuple[MemorySource, ...] = (
        CuratedMemory(curated),
        SessionHistory(
            SessionRepository(db), settings.max_stored_message_bytes, settings.history_token_budget
        ),
        MemoryGateway(client, audit, degraded),
        longterm,
        episodic,
    )
    tokens = await TokenStore.open(db, settings.token_cache_ttl, cipher)
    tokens.on_change(longterm.pool.invalidate)
    tokens.on_change(curated.forget)
    return MemoryServices(
        settings=settings,
        engine=engine,
        db=db,
        client=client,
        tokens=tokens,
        audit=audit,
        curated=curated,
        degraded=degraded,
        longterm=longterm,
        vectors=vectors,
        vector_threads=vector_threads,
        sources=sources,
        optimizer=optimizer,
        episodic=episodic,
        generations=generations,
        access=AccessStats(db),
    )
