"""The Mem0 instances, one per token, and the calls into them.

Mem0 is untyped and blocking: every call into it runs on the bounded `BlockingExecutor`, and
everything outside this package sees `StoredMemory`, `FactChange` and plain strings.

- One instance per token, keyed by the fingerprint of the token's memory config
  (`config.fingerprint`): built lazily on first use (in the thread pool: construction blocks),
  rebuilt when the fingerprint changes, dropped by `invalidate` (registered with
  `TokenStore.on_change`, so PATCH/rotate/delete take effect at once). A replaced instance is
  closed (its history SQLite connection) as soon as no call is using it any more.
- At most `max_instances` instances (`MEM0_MAX_INSTANCES`): building one more closes the least
  recently used (an idle one first; a busy one is closed once its calls end), and its token
  builds a new one on its next call. A process of many tokens thus holds the histories and
  HTTP clients of the tokens in use, not of every token it ever served.
- Every instance keeps its vectors in the process's one vector engine (`instance.build`); the
  engine belongs to the runtime, which closes it after the pool.
- Memory writes (background adds) take at most `threads - 1` threads, so a recall never waits
  for a thread only because every thread is writing.
- Mem0's own history lives in the instance's memory (`instance.build`): it grows with every
  write, so an instance is replaced after `MAX_WRITES_PER_INSTANCE` writes (a build is cheap
  and paid by background work), and after a namespace is deleted (an erased user's text goes with
  the old instance).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.core.heap import freeze_long_lived
from memory_bridge.sources.longterm import instance, logfilter
from memory_bridge.sources.longterm import pool_entries as entries
from memory_bridge.sources.longterm import pool_work as work
from memory_bridge.sources.longterm.config import Mem0Spec
from memory_bridge.sources.longterm.events import FactChange
from memory_bridge.sources.longterm.points import StoredMemory
from memory_bridge.sources.longterm.pool_entries import Entry
from memory_bridge.vectors.index import VectorEngine, VectorIndex

__all__ = ["Mem0Pool"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# Bounds Mem0's in-memory history (its fact changes and last messages per session scope).
MAX_WRITES_PER_INSTANCE = 500
# MEM0_MAX_INSTANCES: twice VECTOR_MAX_OPEN_SHARDS, so tokens with open shards keep theirs.
DEFAULT_MAX_INSTANCES = 64


class Mem0Pool:
    def __init__(
        self,
        engine: VectorEngine,
        mem0_dir: Path,
        *,
        threads: int,
        embed_timeout: float,
        llm_timeout: float,
        secrets: tuple[str, ...] = (),
        max_instances: int = DEFAULT_MAX_INSTANCES,
    ) -> None:
        self.engine = engine
        self._mem0_dir = mem0_dir
        self._executor = BlockingExecutor(threads)
        self._threads = threads
        self._writers: asyncio.Semaphore | None = None
        self._embed_timeout = embed_timeout
        self._llm_timeout = llm_timeout
        self._secrets = secrets  # of the process (the Qdrant server's key): scrubbed from logs
        # Least recently used first; at most `max_instances` (0: no bound).
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._max_instances = max_instances
        self._builds: set[asyncio.Task[None]] = set()
        self._closed = False
        self.built = 0  # instances constructed so far (tests, diagnostics)
        self.evicted = 0  # instances closed to keep within `max_instances`

    @property
    def instances(self) -> int:
        """The instances kept (built or being built); retired ones still busy not counted."""
        return len(self._entries)

    @property
    def mem0_dir(self) -> Path:
        return self._mem0_dir

    @property
    def executor(self) -> BlockingExecutor:
        return self._executor

    # ---- operations ---------------------------------------------------------------

    async def search(
        self, spec: Mem0Spec, namespace: str | None, query: str, limit: int
    ) -> list[StoredMemory]:
        """The memories nearest to `query`, best first (`namespace=None`: in every namespace).
        Mem0's `search` minus its 60-candidate over-fetch and per-result models (time of each
        request holding the GIL): with no keyword list and no entity store (no spaCy) its
        score is this cosine, cut at the same threshold (docs/decisions.md)."""
        filters = {"user_id": namespace if namespace is not None else "*"}
        return await self._call(
            spec, partial(work.search, query=query, limit=limit, filters=filters)
        )

    async def add(
        self,
        spec: Mem0Spec,
        namespace: str,
        messages: list[dict[str, str]],
        prompt: str | None,
        metadata: dict[str, str] | None = None,
        *,
        replacing: str | None = None,
        infer: bool = True,
    ) -> tuple[list[StoredMemory], list[FactChange]]:
        """Extract memories from `messages` (one LLM call) and store them, each with
        `metadata`; `infer=False`: store the messages' texts as they are (no LLM).
        `replacing`: an event id whose memories (an earlier attempt's) are deleted first.
        Returns what was deleted, and the changes the add made."""

        run = partial(
            work.add,
            spec=spec,
            namespace=namespace,
            messages=messages,
            prompt=prompt,
            metadata=metadata,
            replacing=replacing,
            infer=infer,
        )
        return await self._call(spec, run, write=True)

    async def add_raw(
        self, spec: Mem0Spec, namespace: str, items: list[tuple[str, dict[str, str]]]
    ) -> int:
        """Store texts as they are (no LLM: Mem0's `infer=False`), each with custom metadata
        that search results carry back (benchmarks: which turn a memory came from)."""

        run = partial(work.add_raw, namespace=namespace, items=items)
        return await self._call(spec, run, write=True)

    async def with_memory(
        self, spec: Mem0Spec, fn: Callable[[Any], T], *, write: bool = False
    ) -> T:
        """`fn` on the token's Mem0 instance, in the pool's threads (consolidation's steps)."""
        return await self._call(spec, fn, write=write)

    async def get(self, spec: Mem0Spec, memory_id: str) -> StoredMemory | None:
        if not work.is_uuid(memory_id):
            return None
        return await self._call(spec, partial(work.get, memory_id=memory_id))

    async def delete(self, spec: Mem0Spec, memory_id: str) -> StoredMemory | None:
        """The memory deleted, or None if there was none with that id."""
        if not work.is_uuid(memory_id):
            return None
        return await self._call(spec, partial(work.delete, memory_id=memory_id))

    async def update(self, spec: Mem0Spec, memory_id: str, text: str) -> StoredMemory | None:
        """An operator's correction of a fact (re-embedded); None if there was no such one."""
        if not work.is_uuid(memory_id):
            return None
        run = partial(work.update, memory_id=memory_id, text=text)
        return await self._call(spec, run, write=True)

    async def delete_namespace(self, spec: Mem0Spec, namespace: str) -> list[StoredMemory]:
        try:
            return await self._call(spec, lambda memory: work.delete_where(memory, spec, namespace))
        finally:
            self.invalidate(spec.token_id)  # its history held the namespace's texts

    async def delete_tagged(
        self, spec: Mem0Spec, namespace: str, event_id: str
    ) -> list[StoredMemory]:
        """Every memory of a namespace written for one event, deleted; the memories deleted."""
        return await self.delete_of_turns(spec, namespace, (event_id,))

    async def delete_of_turns(
        self, spec: Mem0Spec, namespace: str, event_ids: Sequence[str]
    ) -> list[StoredMemory]:
        """Delete every memory of a namespace that the turns `event_ids` added (their tag);
        the memories deleted. Mem0's history of them goes with the instance."""
        if not event_ids:
            return []
        tags = tuple(event_ids)
        try:
            return await self._call(
                spec, lambda memory: work.delete_where(memory, spec, namespace, tags), write=True
            )
        finally:
            self.invalidate(spec.token_id)

    async def list_memories(self, spec: Mem0Spec, namespace: str | None) -> list[StoredMemory]:
        """Every memory of the token's current embedding space (or of one namespace), newest
        first. Read from the engine: Mem0's own listing needs a namespace and caps its size."""

        # The index is opened in the thread too: opening a shard blocks.
        def run() -> list[StoredMemory]:
            return work.listing(self._index(spec), spec, namespace)

        return await self._run(spec.secrets, run)

    async def page_memories(
        self, spec: Mem0Spec, namespace: str | None, offset: int, limit: int
    ) -> tuple[list[StoredMemory], int]:
        """One page of the memories (in storage order) and how many there are: a page costs
        its offset and size, not the whole list (the console pages a user of any size)."""

        def run() -> tuple[list[StoredMemory], int]:
            return work.page(self._index(spec), spec, namespace, offset, limit)

        return await self._run(spec.secrets, run)

    async def clear(self, spec: Mem0Spec) -> list[StoredMemory]:
        """Every memory of the token, in every embedding space it used, and Mem0's history
        (the token and its episodic index stay); the memories deleted."""
        self.invalidate(spec.token_id)

        run = partial(work.clear_token, self.engine, self._mem0_dir, spec.token_id)
        return await self._run(spec.secrets, run)

    async def purge(self, token_id: int) -> int:
        """Delete every long-term memory of a token, in every embedding space it used, and
        Mem0's history. The token's whole vector storage goes: this is the token's purge
        (its episodic shards go with it). Returns how many shards were dropped."""
        self.invalidate(token_id)

        dropped = await self._run(
            (), partial(work.purge_token, self.engine, self._mem0_dir, token_id)
        )
        if dropped:
            log.info("token %d: vector storage purged (%d shard(s))", token_id, dropped)
        return dropped

    # ---- instances the pool does not keep (a rebuild's) -----------------------------

    async def detached(self, spec: Mem0Spec) -> Any:
        """A Mem0 instance bound to `spec`'s shard that recall never uses (a rebuild fills a
        new generation through it); run calls with `on_detached`, end with `close_detached`."""
        return await self._run(spec.secrets, lambda: self._construct(spec))

    async def on_detached(self, spec: Mem0Spec, memory: Any, fn: Callable[[Any], T]) -> T:
        return await self._run(spec.secrets, lambda: fn(memory))

    def close_detached(self, memory: Any) -> None:
        self._executor.submit_detached(lambda: instance.close(memory))

    # ---- instances ----------------------------------------------------------------

    def invalidate(self, token_id: int) -> None:
        """The token changed (or went): its instance is not used again, and is closed once idle."""
        entry = self._entries.pop(token_id, None)
        if entry is not None:
            self._retire(entry)

    def _drop(self, token_id: int, entry: Entry) -> None:
        if self._entries.get(token_id) is entry:
            del self._entries[token_id]
        self._retire(entry)

    def current(self, token_id: int) -> Any:
        """The token's current Mem0 instance, or None (diagnostics and tests)."""
        entry = self._entries.get(token_id)
        if entry is None or entries.failed_or_pending(entry.ready):
            return None
        return entry.ready.result()

    async def close_all(self, timeout: float) -> None:
        self._closed = True
        for token_id in list(self._entries):
            self.invalidate(token_id)
        await self._executor.shutdown(timeout)
        for task in list(self._builds):
            task.cancel()
        log.debug("long-term memory pool closed")

    def _index(self, spec: Mem0Spec) -> VectorIndex:
        return self.engine.index(spec.token_id, spec.model_id, spec.dims)

    def _entry(self, spec: Mem0Spec) -> Entry:
        if self._closed:
            raise RuntimeError("the long-term memory pool is closed")
        entry = self._entries.get(spec.token_id)
        if entry is not None and entry.fingerprint == spec.fingerprint:
            self._entries.move_to_end(spec.token_id)
            return entry
        if entry is not None:
            self._retire(entry)
        loop = asyncio.get_running_loop()
        entry = Entry(spec.fingerprint, loop.create_future())
        self._entries[spec.token_id] = entry
        self._entries.move_to_end(spec.token_id)
        self._evict()
        task = loop.create_task(self._build(spec, entry))
        self._builds.add(task)
        task.add_done_callback(self._builds.discard)
        return entry

    def _evict(self) -> None:
        """Past `max_instances`, drop the least recently used instances, idle ones first (a busy
        one is closed when its last call ends); the newest, just added, is never one of them."""
        for token_id, entry in entries.victims(self._entries, self._max_instances):
            self._drop(token_id, entry)
            self.evicted += 1

    async def _build(self, spec: Mem0Spec, entry: Entry) -> None:
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

    def _construct(self, spec: Mem0Spec) -> Any:
        modules = len(sys.modules)
        memory = instance.build(
            spec,
            self.engine,
            self._mem0_dir,
            embed_timeout=self._embed_timeout,
            llm_timeout=self._llm_timeout,
        )
        # Frozen only when the build imported Mem0 or a provider (a one-off load): an instance
        # is evicted and rebuilt, and a frozen one's cycles would never be collected (measured:
        # ~0.8 MB of heap kept per build, docs/performance.md#mem0-instances).
        if len(sys.modules) != modules:
            freeze_long_lived()
        log.debug("token %d: Mem0 instance built (%s)", spec.token_id, spec.model_id)
        return memory

    def _retire(self, entry: Entry) -> None:
        entry.retired = True
        if entry.users == 0:
            self._close(entry)

    def _release(self, entry: Entry) -> None:
        entry.users -= 1
        if entry.retired and entry.users == 0:
            self._close(entry)

    def _close(self, entry: Entry) -> None:
        if entry.closed or entries.failed_or_pending(entry.ready):
            return  # a build still running closes it when it finishes
        entry.closed = True
        memory = entry.ready.result()
        self._executor.submit_detached(lambda: instance.close(memory))

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
                entry.writes += 1
                if entry.writes >= MAX_WRITES_PER_INSTANCE and not entry.retired:
                    self._drop(spec.token_id, entry)
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
        # The thread runs in a copy of this context: it sees the secrets and the request id.
        with logfilter.serving((*secrets, *self._secrets)):
            return await self._executor.run(fn, on_finish)
