"""Which shard a token's Mem0 instance is bound to: the active generation of its long-term layer.

Like the episodic index (`sources.vector_generations`), the long-term layer has generations:
generation 0 is the shard `mem0:<model>`, generation n is `mem0:<model>@g<n>`, filled by a
rebuild from the `longterm.*` events (`lifecycle.rebuild_longterm`) while Mem0 keeps using the
active one. During a re-embed the token's config already names the new embedder, so the row
keeps the old config's embedder fields, sealed (they hold keys): the instance keeps embedding
queries and writes with the old embedder into the old shard until the switch.

A spec bound to another generation than 0 gets its own fingerprint, so the pool builds a new
instance when the generation switches.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from memory_bridge.sources.longterm.config import (
    INSTANCE_FIELDS,
    Mem0ConfigError,
    Mem0Spec,
    build_spec,
)
from memory_bridge.sources.vector_generations import Generation, base_model
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.encryption import UndecryptableSecret

__all__ = ["Resolved", "instance_fields", "on_shard", "resolve", "vectors_of"]


def instance_fields(config: TokenConfig) -> dict[str, Any]:
    """The fields of `config` that shape a Mem0 instance's vectors (its embedder; the key:
    seal them). The memory LLM's are not kept: a change of those applies at once."""
    return {name: getattr(config, name) for name in INSTANCE_FIELDS if name.startswith("embed_")}


def on_shard(spec: Mem0Spec, model_id: str, dims: int) -> Mem0Spec | None:
    """`spec` bound to the shard `model_id` (a generation of its model), or None if that
    shard holds vectors of another model or size."""
    if base_model(model_id) != spec.model_id or dims != spec.dims:
        return None
    if model_id == spec.model_id:
        return spec
    return replace(spec, model_id=model_id, fingerprint=f"{spec.fingerprint}@{model_id}")


def vectors_of(spec: Mem0Spec) -> tuple[Any, ...]:
    """What makes a spec's vectors (its keys may differ without changing them)."""
    block = dict((spec.embedder or {}).get("config") or {})
    block.pop("api_key", None)
    provider = (spec.embedder or {}).get("provider")
    body = json.dumps(block, sort_keys=True, default=str)
    return (spec.model_id, spec.dims, provider, body, spec.local_model)


class Resolved:
    """The active spec, and the sealed fields that made it (None: the config's own)."""

    def __init__(self, spec: Mem0Spec, sealed: str | None) -> None:
        self.spec = spec
        self.sealed = sealed


def resolve(
    row: Generation | None,
    token_id: int,
    config: TokenConfig,
    mem0_dir: Path,
    unseal: Callable[[str], Any],
) -> Resolved:
    """The spec of the token's active long-term shard (`row`: its generation row, if any).
    Raises `Mem0ConfigError` when the config itself is unusable."""
    current = build_spec(token_id, config, mem0_dir)
    if row is None:
        return Resolved(current, None)
    basis, sealed = current, None
    if row.embedder is not None:
        try:
            fields = dict(unseal(row.embedder))
            basis = build_spec(token_id, config.model_copy(update=fields), mem0_dir)
            sealed = row.embedder
        except (UndecryptableSecret, Mem0ConfigError, ValueError, KeyError, TypeError):
            basis, sealed = current, None
    bound = on_shard(basis, row.active_model, row.active_dims)
    if bound is None:
        # The row describes another embedder (changed without a re-embed): never query a
        # shard of another model; generation 0 of the config's own instead.
        return Resolved(current, None)
    return Resolved(bound, sealed)
