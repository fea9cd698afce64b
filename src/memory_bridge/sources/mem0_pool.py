"""The Mem0 boundary: a pool of Mem0 instances over one shared Qdrant client.

Mem0 is untyped and blocking; this module is the only place that touches it (everything else
sees `StoredMemory` and plain strings), and every call into it runs on the bounded
`BlockingExecutor`.

- One Mem0 instance per token, keyed by the fingerprint of the token's memory config
  (`mem0_config.fingerprint`): built lazily on first use (in the thread pool — construction
  blocks), rebuilt when the fingerprint changes, dropped by `invalidate` (registered with
  `TokenStore.on_change`, so PATCH/rotate/delete take effect at once). A replaced instance is
  closed (its history SQLite connection) as soon as no call is using it any more; the shared
  Qdrant client is never closed by an instance.
- One Qdrant client for all instances, opened on first use (local mode loads every collection
  into memory when it opens, so a deployment that never uses long-term memory never pays that).
- Memory writes (background adds) take at most `threads - 1` threads, so a recall never waits
  for a thread only because every thread is writing.
- `mem0` is imported on first use, after `MEM0_TELEMETRY`/`MEM0_DIR` are set (`app.py`).
- Mem0 logs exception texts that can quote credentials: its log records are scrubbed of the
  secrets of the token being served, and repeated "X not installed" notices are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import logging
import os
import threading
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from qdrant_client import models

from memory_bridge.heap import freeze_long_lived
from memory_bridge.sources import mem0_config
from memory_bridge.sources.blocking import BlockingExecutor
from memory_bridge.sources.mem0_config import Mem0Spec
from memory_bridge.sources.qdrant_store import SharedQdrantClient, collection_names, open_client

log = logging.getLogger(__name__)
T = TypeVar("T")

# Secrets of the token whose work a thread is doing; the Mem0 log filter reads it.
_log_secrets: ContextVar[tuple[str, ...]] = ContextVar("mem0_log_secrets", default=())
# The embedder Mem0 constructs before a local model is swapped in: never called.
_PLACEHOLDER_EMBEDDER_URL = "http://127.0.0.1:9/v1"
_SCROLL_PAGE = 256


@dataclass(frozen=True, slots=True)
class StoredMemory:
    id: str
    text: str
    namespace: str
    created_at: str | None = None
    updated_at: str | None = None
    score: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)  # custom keys given to `add_raw`


@dataclass(frozen=True, slots=True)
class PoolPaths:
    qdrant_path: Path
    qdrant_url: str
    qdrant_api_key: str
    mem0_dir: Path


@dataclass(eq=False)
class _Entry:
    fingerprint: str
    ready: asyncio.Future[Any]  # the Mem0 `Memory` instance
    users: int = 0  # calls holding it (until their thread has finished)
    retired: bool = False
    closed: bool = False


class Mem0Pool:
    def __init__(
        self,
        paths: PoolPaths,
        *,
        threads: int,
        embed_timeout: float,
        llm_timeout: float,
    ) -> None:
        self._paths = paths
        self._executor = BlockingExecutor(threads)
        self._threads = threads
        self._writers: asyncio.Semaphore | None = None
        self._embed_timeout = embed_timeout
        self._llm_timeout = llm_timeout
        self._entries: dict[int, _Entry] = {}
        self._client: SharedQdrantClient | None = None
        self._client_lock = threading.Lock()
        self._builds: set[asyncio.Task[None]] = set()
        self._closed = False
        self.built = 0  # instances constructed so far (tests, diagnostics)

    @property
    def mem0_dir(self) -> Path:
        return self._paths.mem0_dir

    @property
    def executor(self) -> BlockingExecutor:
        return self._executor

    # ---- operations ---------------------------------------------------------------

    async def search(
        self, spec: Mem0Spec, namespace: str | None, query: str, limit: int
    ) -> list[StoredMemory]:
        """`namespace=None` searches every namespace of the token."""
        filters = {"user_id": namespace if namespace is not None else "*"}

        def run(memory: Any) -> list[StoredMemory]:
            found = memory.search(query, filters=filters, top_k=limit)
            return [_from_mem0(item) for item in found.get("results", [])]

        return await self._call(spec, run)

    async def add(
        self,
        spec: Mem0Spec,
        namespace: str,
        messages: list[dict[str, str]],
        prompt: str | None,
        metadata: dict[str, str] | None = None,
    ) -> int:
        """Extract memories from `messages` (one LLM call) and store them, each with
        `metadata`; how many were added."""

        def run(memory: Any) -> int:
            added = memory.add(
                messages, user_id=namespace, infer=True, prompt=prompt, metadata=metadata
            )
            return len(added.get("results", []))

        return await self._call(spec, run, write=True)

    async def add_raw(
        self, spec: Mem0Spec, namespace: str, items: list[tuple[str, dict[str, str]]]
    ) -> int:
        """Store texts as they are (no LLM: Mem0's `infer=False`), each with custom metadata
        that search results carry back (benchmarks: which turn a memory came from)."""

        def run(memory: Any) -> int:
            for text, metadata in items:
                memory.add(
                    [{"role": "user", "content": text}],
                    user_id=namespace,
                    infer=False,
                    metadata=dict(metadata),
                )
            return len(items)

        return await self._call(spec, run, write=True)

    async def get(self, spec: Mem0Spec, memory_id: str) -> StoredMemory | None:
        if not _is_uuid(memory_id):
            return None

        def run(memory: Any) -> StoredMemory | None:
            found = memory.get(memory_id)
            return None if not found else _from_mem0(found)

        return await self._call(spec, run)

    async def delete(self, spec: Mem0Spec, memory_id: str) -> bool:
        if not _is_uuid(memory_id):
            return False

        def run(memory: Any) -> bool:
            if not memory.get(memory_id):
                return False
            memory.delete(memory_id)
            return True

        return await self._call(spec, run)

    async def delete_namespace(self, spec: Mem0Spec, namespace: str) -> int:
        def run(memory: Any) -> int:
            count = len(_scroll(memory.vector_store.client, spec.collection, namespace))
            if count:
                memory.delete_all(user_id=namespace)
            return count

        return await self._call(spec, run)

    async def list_memories(self, spec: Mem0Spec, namespace: str | None) -> list[StoredMemory]:
        """Every memory of the token's current collection (or of one namespace), newest first.
        Read straight from Qdrant: Mem0's own listing needs a namespace and caps its size."""

        def run() -> list[StoredMemory]:
            client = self._qdrant()
            if not client.collection_exists(spec.collection):
                return []
            points = _scroll(client, spec.collection, namespace)
            items = [_from_point(p) for p in points]
            items.sort(key=lambda m: (m.created_at or "", m.id), reverse=True)
            return items

        return await self._run(spec.secrets, run)

    async def purge(self, token_id: int) -> list[str]:
        """Delete every long-term memory of a token: all its collections (every embedding
        space it ever used) and Mem0's history database. Returns the dropped collections."""
        self.invalidate(token_id)
        paths = self._paths

        def run() -> list[str]:
            found: list[str] = []
            # Local storage that was never created holds nothing: do not create it now.
            if paths.qdrant_url or paths.qdrant_path.exists():
                client = self._qdrant()
                found = mem0_config.token_collections(token_id, collection_names(client))
                for name in found + [f"{n}_entities" for n in found]:  # + Mem0's entity store
                    if client.collection_exists(name):
                        client.delete_collection(name)
            history = mem0_config.history_path(paths.mem0_dir, token_id)
            for path in history.parent.glob(history.name + "*"):
                path.unlink(missing_ok=True)
            return found

        names = await self._run((), run)
        if names:
            log.info("token %d: long-term memory purged (%d collection(s))", token_id, len(names))
        return names

    # ---- instances ----------------------------------------------------------------

    def invalidate(self, token_id: int) -> None:
        """The token changed (or went): its instance is not used again, and is closed once idle."""
        entry = self._entries.pop(token_id, None)
        if entry is not None:
            self._retire(entry)

    def current(self, token_id: int) -> Any:
        """The token's current Mem0 instance, or None (diagnostics and tests)."""
        entry = self._entries.get(token_id)
        if entry is None or _failed_or_pending(entry.ready):
            return None
        return entry.ready.result()

    async def close_all(self, timeout: float) -> None:
        self._closed = True
        for token_id in list(self._entries):
            self.invalidate(token_id)
        await self._executor.shutdown(timeout)
        for task in list(self._builds):
            task.cancel()
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(client.close)
        log.debug("long-term memory pool closed")

    def _entry(self, spec: Mem0Spec) -> _Entry:
        if self._closed:
            raise RuntimeError("the long-term memory pool is closed")
        entry = self._entries.get(spec.token_id)
        if entry is not None and entry.fingerprint == spec.fingerprint:
            return entry
        if entry is not None:
            self._retire(entry)
        loop = asyncio.get_running_loop()
        entry = _Entry(spec.fingerprint, loop.create_future())
        self._entries[spec.token_id] = entry
        task = loop.create_task(self._build(spec, entry))
        self._builds.add(task)
        task.add_done_callback(self._builds.discard)
        return entry

    async def _build(self, spec: Mem0Spec, entry: _Entry) -> None:
        try:
            memory = await self._run(spec.secrets, lambda: self._construct(spec))
        except BaseException as exc:
            if self._entries.get(spec.token_id) is entry:
                del self._entries[spec.token_id]  # the next call tries again
            if not isinstance(exc, Exception):
                entry.ready.cancel()
                raise
            if not entry.ready.done():
                entry.ready.set_exception(exc)
                entry.ready.exception()  # retrieved: waiters may all have given up
            return
        entry.ready.set_result(memory)
        self.built += 1
        if entry.retired and entry.users == 0:
            self._close(entry)

    def _retire(self, entry: _Entry) -> None:
        entry.retired = True
        if entry.users == 0:
            self._close(entry)

    def _release(self, entry: _Entry) -> None:
        entry.users -= 1
        if entry.retired and entry.users == 0:
            self._close(entry)

    def _close(self, entry: _Entry) -> None:
        if entry.closed or _failed_or_pending(entry.ready):
            return  # a build still running closes it when it finishes
        entry.closed = True
        memory = entry.ready.result()
        self._executor.submit_detached(lambda: _close_memory(memory))

    async def _call(self, spec: Mem0Spec, fn: Callable[[Any], T], *, write: bool = False) -> T:
        """`write`: a memory write (background work). Writes also take one of `threads - 1`
        writer slots, so with two or more threads a recall never finds every thread busy
        writing (many end users' adds at once). Like a thread slot, a writer slot is freed
        when the thread ends, not when the caller stops waiting."""
        entry = self._entry(spec)
        entry.users += 1
        writers = self._writer_slots() if write else None
        try:
            memory = await asyncio.shield(entry.ready)
            if writers is not None:
                await writers.acquire()
        except BaseException:
            self._release(entry)
            raise

        def finish() -> None:
            if writers is not None:
                writers.release()
            self._release(entry)

        return await self._run(spec.secrets, lambda: fn(memory), finish)

    def _writer_slots(self) -> asyncio.Semaphore:
        # Created on first use, inside the running loop that will use it.
        if self._writers is None:
            self._writers = asyncio.Semaphore(max(1, self._threads - 1))
        return self._writers

    async def _run(
        self,
        secrets: tuple[str, ...],
        fn: Callable[[], T],
        on_finish: Callable[[], None] | None = None,
    ) -> T:
        token = _log_secrets.set((*secrets, self._paths.qdrant_api_key))
        try:  # the thread runs in a copy of this context: it sees the secrets and the rid
            return await self._executor.run(fn, on_finish)
        finally:
            _log_secrets.reset(token)

    # ---- in the thread pool -------------------------------------------------------

    def _qdrant(self) -> SharedQdrantClient:
        with self._client_lock:
            if self._client is None:
                p = self._paths
                self._client = open_client(p.qdrant_path, p.qdrant_url, p.qdrant_api_key)
                freeze_long_lived()  # local mode: every stored point is now in memory
                log.info(
                    "Qdrant %s opened",
                    "server" if p.qdrant_url else f"local mode ({p.qdrant_path})",
                )
            return self._client

    def _construct(self, spec: Mem0Spec) -> Any:
        client = self._qdrant()
        memory_class = _mem0_memory_class(self._paths.mem0_dir)
        _preload_providers(spec)
        spec.history_path.parent.mkdir(parents=True, exist_ok=True)
        embedder = spec.embedder or {
            "provider": "openai",
            "config": {
                "api_key": mem0_config.NO_KEY,
                "openai_base_url": _PLACEHOLDER_EMBEDDER_URL,
                "embedding_dims": spec.dims,
            },
        }
        config = {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "client": client,
                    "collection_name": spec.collection,
                    "embedding_model_dims": spec.dims,
                },
            },
            "llm": copy.deepcopy(spec.llm),
            "embedder": copy.deepcopy(embedder),
            "history_db_path": str(spec.history_path),
        }
        memory = memory_class.from_config(config)
        try:
            if spec.local_model is not None:
                from memory_bridge.sources.local_embedder import LocalEmbedding

                memory.embedding_model = LocalEmbedding(spec.local_model, spec.dims)
            else:
                _bound_client(memory.embedding_model, spec.embedder, self._embed_timeout)
                if hasattr(memory.embedding_model, "_pass_dimensions_to_api"):
                    memory.embedding_model._pass_dimensions_to_api = spec.send_dimensions
            _bound_client(memory.llm, spec.llm, self._llm_timeout)
        except BaseException:
            _close_memory(memory)
            raise
        freeze_long_lived()  # Mem0, its providers' modules and clients, the instance itself
        log.debug("token %d: Mem0 instance built (%s)", spec.token_id, spec.collection)
        return memory


def _failed_or_pending(ready: asyncio.Future[Any]) -> bool:
    return not ready.done() or ready.cancelled() or ready.exception() is not None


def _close_memory(memory: Any) -> None:
    """Mem0's history SQLite connection and the HTTP clients of its LLM and embedder; never the
    shared Qdrant client."""
    with contextlib.suppress(Exception):
        memory.close()
    for component in (getattr(memory, "llm", None), getattr(memory, "embedding_model", None)):
        close = getattr(getattr(component, "client", None), "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def _bound_client(component: Any, block: dict[str, Any] | None, timeout: float) -> None:
    """Give an OpenAI-client-based component a finite timeout and one retry (the SDK default
    is 10 minutes and two retries, which would hold a pool thread far beyond our own timeouts).
    The `openai` provider's client is rebuilt from the token's values alone: Mem0 would
    otherwise let OPENAI_BASE_URL / OPENROUTER_API_KEY from the server environment redirect it.
    """
    import openai

    client = getattr(component, "client", None)
    if not isinstance(client, openai.OpenAI):
        return
    if block is not None and block.get("provider") == "openai":
        config = block.get("config") or {}
        component.client = openai.OpenAI(
            api_key=str(config.get("api_key") or mem0_config.NO_KEY),
            base_url=str(config.get("openai_base_url") or "https://api.openai.com/v1"),
            timeout=timeout,
            max_retries=1,
        )
    else:
        component.client = client.with_options(timeout=timeout, max_retries=1)


_mem0_lock = threading.Lock()


def _mem0_memory_class(mem0_dir: Path) -> Any:
    """Import Mem0 (once). `app.py` sets its environment first; a pool used on its own (a
    benchmark) still keeps Mem0 from phoning home or writing to the home directory."""
    with _mem0_lock:
        os.environ.setdefault("MEM0_TELEMETRY", "False")
        os.environ.setdefault("MEM0_DIR", str(mem0_dir.resolve()))
        from mem0 import Memory  # type: ignore[import-untyped]

        _install_log_filter()
        return Memory


class _Mem0LogFilter(logging.Filter):
    """Scrubs the served token's secrets from Mem0's log records; drops repeated notices."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "not installed" in message:
            if message in self._seen:
                return False
            self._seen.add(message)
        for secret in _log_secrets.get():
            if secret:
                message = message.replace(secret, "***")
        record.msg, record.args = message, None
        if record.exc_info:  # a traceback would print the exception's text unscrubbed
            record.exc_info, record.exc_text = None, None
        return True


_filter = _Mem0LogFilter()


def _install_log_filter() -> None:
    """Logger filters do not apply to child loggers: put it on every `mem0.*` logger."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        ours = name == "mem0" or name.startswith("mem0.")
        if ours and isinstance(logger, logging.Logger) and _filter not in logger.filters:
            logger.addFilter(_filter)


def _preload_providers(spec: Mem0Spec) -> None:
    """Mem0 imports a provider's module (creating its logger) during construction; import it
    first so the log filter is on that logger before anything is logged through it."""
    from mem0.utils.factory import EmbedderFactory, LlmFactory  # type: ignore[import-untyped]

    paths = [
        "mem0.vector_stores.qdrant.Qdrant",
        LlmFactory.provider_to_class.get(spec.llm["provider"], ("",))[0],
    ]
    if spec.embedder is not None:
        paths.append(EmbedderFactory.provider_to_class.get(spec.embedder["provider"], ""))
    for path in paths:
        if path:
            importlib.import_module(path.rsplit(".", 1)[0])
    _install_log_filter()


def _scroll(client: Any, collection: str, namespace: str | None) -> list[Any]:
    flt = None
    if namespace is not None:
        flt = models.Filter(
            must=[models.FieldCondition(key="user_id", match=models.MatchValue(value=namespace))]
        )
    points: list[Any] = []
    offset: Any = None
    while True:
        batch, offset = client.scroll(
            collection,
            scroll_filter=flt,
            limit=_SCROLL_PAGE,
            offset=offset,
            with_payload=True,
            with_vectors=False,
        )
        points.extend(batch)
        if offset is None:
            return points


def _from_mem0(item: dict[str, Any]) -> StoredMemory:
    score = item.get("score")
    metadata = item.get("metadata") or {}
    return StoredMemory(
        id=str(item.get("id")),
        text=str(item.get("memory") or ""),
        namespace=str(item.get("user_id") or ""),
        created_at=item.get("created_at"),
        updated_at=item.get("updated_at"),
        score=float(score) if isinstance(score, int | float) else None,
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


# What Mem0 itself keeps in a point's payload; any other key is custom metadata.
_MEM0_PAYLOAD_KEYS = frozenset(
    {
        "data",
        "hash",
        "user_id",
        "agent_id",
        "run_id",
        "actor_id",
        "role",
        "created_at",
        "updated_at",
        "text_lemmatized",
        "attributed_to",
    }
)


def _from_point(point: Any) -> StoredMemory:
    payload: dict[str, Any] = point.payload or {}
    return StoredMemory(
        id=str(point.id),
        text=str(payload.get("data") or ""),
        namespace=str(payload.get("user_id") or ""),
        created_at=payload.get("created_at"),
        updated_at=payload.get("updated_at"),
        metadata={str(k): str(v) for k, v in payload.items() if k not in _MEM0_PAYLOAD_KEYS},
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
