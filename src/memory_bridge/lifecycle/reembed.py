"""A token's embedder changed (a PATCH of `embed_*`): re-embed its episodic vectors, and its
long-term facts (Mem0's, from their `longterm.*` events) when their vectors change too.

The old vectors are not orphaned: a rebuild into a shard of the new embedder starts as a job
(`lifecycle.rebuild`), and until it switches the token recalls from the old shard, its queries
embedded with the old embedder (kept sealed with the generation). A change of key alone makes
the same vectors: nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memory_bridge.embedding.embedders import EmbedderSpec
from memory_bridge.lifecycle.rebuild import start_rebuild
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.shards import vectors_of
from memory_bridge.sources.vector_generations import EPISODIC, LONGTERM, Generation
from memory_bridge.tenancy.config import TokenConfig

if TYPE_CHECKING:
    from memory_bridge.sources.services import MemoryServices


def same_vectors(old: EmbedderSpec, new: EmbedderSpec) -> bool:
    """Whether two specs make the same vectors (the key may differ)."""
    return (old.provider, old.model, old.dims, old.base_url, old.local) == (
        new.provider,
        new.model,
        new.dims,
        new.base_url,
        new.local,
    )


async def reembed_if_changed(  # called before the new config is stored
    runtime: MemoryServices,
    token_id: int,
    old: TokenConfig | None,
    new: TokenConfig,
    wake: Callable[[], None] | None = None,
) -> Generation | None:
    if old is None:
        return None
    if _longterm_changed(runtime, token_id, old, new):
        await start_rebuild(
            runtime, token_id, LONGTERM, reason="reembed", old_config=old, new_config=new, wake=wake
        )
    episodic = runtime.episodic
    if episodic is None or not runtime.settings.episodic_memory:
        return None
    old_spec, new_spec = episodic.embedder(old), episodic.embedder(new)
    if same_vectors(old_spec, new_spec):
        return None
    return await start_rebuild(
        runtime,
        token_id,
        EPISODIC,
        reason="reembed",
        old_spec=old_spec,
        new_config=new,
        wake=wake,
    )


def _longterm_changed(
    runtime: MemoryServices, token_id: int, old: TokenConfig, new: TokenConfig
) -> bool:
    """Whether the token's Mem0 facts need new vectors: it had them and keeps them, with an
    embedder that makes other vectors (model, size, provider or endpoint)."""
    if not (mem0_config.enabled(old) and mem0_config.enabled(new)):
        return False
    mem0_dir = runtime.longterm.pool.mem0_dir
    try:
        before = mem0_config.build_spec(token_id, old, mem0_dir)
        after = mem0_config.build_spec(token_id, new, mem0_dir)
    except mem0_config.Mem0ConfigError:
        return False
    return vectors_of(before) != vectors_of(after)
