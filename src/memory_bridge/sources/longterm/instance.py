"""Building one Mem0 `Memory` whose vectors live in MemoryBridge's vector engine.

Mem0 2.2 has no way to register a vector store of one's own: its config accepts built-in
provider names only, and `Memory.__init__` builds that provider. So an instance is built with a
placeholder store, then given ours through its public attributes (docs/decisions.md):

1. `Memory.from_config` with the `qdrant` provider on qdrant-client's in-memory mode: no file,
   no thread, no network, one empty collection (most of a build's time is Mem0's in-memory
   history SQLite and the provider clients; nothing written to disk);
2. `memory.vector_store` is set to an `EngineStore` on the token's shard, and the placeholder
   client is closed: it never holds a memory;
3. Mem0's entity store (used only when spaCy is installed) is lazily built from the same
   config; `BridgeMemory` overrides the public `entity_store` property to return a second
   `EngineStore` on the same shard (kind `mem0-entity`) instead;
4. the embedder and the LLM and embedder clients are bound (`embedder.bind`).

`Memory.reset` resets the store it holds (our `EngineStore.reset`: only its own points) and
builds no new one. With `MEM0_TELEMETRY=False` Mem0 builds no telemetry store either.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
import threading
import warnings
from pathlib import Path
from typing import Any

from memory_bridge.sources.longterm import embedder, logfilter
from memory_bridge.sources.longterm.config import Mem0Spec
from memory_bridge.sources.longterm.points import ENTITY_KIND, MEMORY_KIND
from memory_bridge.vectors.index import VectorEngine

__all__ = ["build", "close"]

HISTORY_IN_MEMORY = ":memory:"
_lock = threading.Lock()
_bridge_class: Any = None


def build(
    spec: Mem0Spec,
    engine: VectorEngine,
    mem0_dir: Path,
    *,
    embed_timeout: float,
    llm_timeout: float,
) -> Any:
    """A Mem0 instance for the token of `spec`, bound to its shard. Blocking: run it in the
    memory thread pool."""
    memory_class = _memory_class(mem0_dir)
    _preload_providers(spec)
    from qdrant_client import QdrantClient

    from memory_bridge.sources.longterm.mem0_store import EngineStore

    index = engine.index(spec.token_id, spec.model_id, spec.dims)
    # The placeholder is asked for payload indexes, which its in-memory mode ignores.
    warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
    placeholder = QdrantClient(location=":memory:")
    config = {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "client": placeholder,
                "collection_name": "placeholder",
                "embedding_model_dims": spec.dims,
            },
        },
        "llm": copy.deepcopy(spec.llm),
        "embedder": copy.deepcopy(embedder.embedder_block(spec)),
        # Mem0's history (every fact's old and new text, and recent messages) stays in memory:
        # the longterm.* events already record each change, and a file would keep an erased
        # user's words on disk (docs/decisions.md). One connection, shared across threads.
        "history_db_path": HISTORY_IN_MEMORY,
    }
    try:
        memory = memory_class.from_config(config)
    finally:
        placeholder.close()
    try:
        memory.vector_store = EngineStore(index, spec.token_id, MEMORY_KIND)
        memory.entity_store_of_bridge = EngineStore(index, spec.token_id, ENTITY_KIND)
        embedder.bind(memory, spec, embed_timeout, llm_timeout)
    except BaseException:
        close(memory)
        raise
    return memory


def close(memory: Any) -> None:
    """Mem0's history SQLite connection and the HTTP clients of its LLM and embedder; the
    engine's shard belongs to the engine, which closes it."""
    with contextlib.suppress(Exception):  # best effort: it is going anyway
        memory.close()
    embedder.close_clients(memory)


def _memory_class(mem0_dir: Path) -> Any:
    """Import Mem0 (once). `runtime.prepare_mem0_environment` sets its environment first; a
    pool used on its own (a benchmark) still keeps Mem0 from phoning home or writing to the
    home directory."""
    global _bridge_class
    with _lock:
        if _bridge_class is None:
            os.environ.setdefault("MEM0_TELEMETRY", "False")
            os.environ.setdefault("MEM0_DIR", str(mem0_dir.resolve()))
            from mem0 import Memory  # type: ignore[import-untyped]

            class BridgeMemory(Memory):  # type: ignore[misc]
                """Mem0's `Memory` whose entity store is ours too (see the module docstring)."""

                entity_store_of_bridge: Any = None

                @property
                def entity_store(self) -> Any:
                    return self.entity_store_of_bridge

            _bridge_class = BridgeMemory
        logfilter.install()
        return _bridge_class


def _preload_providers(spec: Mem0Spec) -> None:
    """Mem0 imports a provider's module (creating its logger) during construction; import it
    first so the log filter is on that logger before anything is logged through it."""
    from mem0.utils.factory import EmbedderFactory, LlmFactory  # type: ignore[import-untyped]

    paths = [
        "mem0.vector_stores.qdrant.Qdrant",
        LlmFactory.provider_to_class.get(spec.llm["provider"], ("",))[0],
    ]
    block = embedder.embedder_block(spec)
    paths.append(EmbedderFactory.provider_to_class.get(block["provider"], ""))
    for path in paths:
        if path:
            importlib.import_module(path.rsplit(".", 1)[0])
    logfilter.install()
