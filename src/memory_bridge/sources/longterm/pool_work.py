"""What the pool runs on a token's Mem0 instance, in its threads: each function takes the
instance (Mem0's `Memory`, untyped) and returns our types."""

from __future__ import annotations

import uuid
from itertools import islice
from pathlib import Path
from typing import Any

from memory_bridge.sources.longterm.config import MODEL_PREFIX, Mem0Spec, end_user, history_path
from memory_bridge.sources.longterm.events import FactChange
from memory_bridge.sources.longterm.points import (
    ENTITY_KIND,
    MEMORY_KIND,
    StoredMemory,
    from_mem0_payload,
    from_mem0_result,
    to_stored,
)
from memory_bridge.vectors.index import VectorEngine, VectorIndex, Where

# Mem0's default search threshold (`Memory.search(threshold=0.1)`), on the cosine.
MIN_SCORE = 0.1


def search(memory: Any, query: str, limit: int, filters: dict[str, str]) -> list[StoredMemory]:
    vector = memory.embedding_model.embed(query, "search")
    found = memory.vector_store.search(query=query, vectors=vector, top_k=limit, filters=filters)
    return [
        from_mem0_payload(str(hit.id), hit.payload, hit.score)
        for hit in found
        if hit.score is not None and hit.score >= MIN_SCORE
    ]


def add(
    memory: Any,
    spec: Mem0Spec,
    namespace: str,
    messages: list[dict[str, str]],
    prompt: str | None,
    metadata: dict[str, str] | None,
    replacing: str | None,
    infer: bool,
) -> tuple[list[StoredMemory], list[FactChange]]:
    removed: list[StoredMemory] = []
    if replacing is not None:
        removed = delete_where(memory, spec, namespace, event_id=replacing)
    added = memory.add(messages, user_id=namespace, infer=infer, prompt=prompt, metadata=metadata)
    return removed, [FactChange.of(item) for item in added.get("results", [])]


def add_raw(memory: Any, namespace: str, items: list[tuple[str, dict[str, str]]]) -> int:
    for text, metadata in items:
        content = [{"role": "user", "content": text}]
        memory.add(content, user_id=namespace, infer=False, metadata=dict(metadata))
    return len(items)


def get(memory: Any, memory_id: str) -> StoredMemory | None:
    found = memory.get(memory_id)
    return None if not found else from_mem0_result(found)


def delete(memory: Any, memory_id: str) -> StoredMemory | None:
    found = memory.get(memory_id)
    if not found:
        return None
    memory.delete(memory_id)
    return from_mem0_result(found)


def update(memory: Any, memory_id: str, text: str) -> StoredMemory | None:
    if not memory.get(memory_id):
        return None
    memory.update(memory_id, text=text)
    return get(memory, memory_id)


def where(
    spec: Mem0Spec, namespace: str | None, event_id: str | tuple[str, ...] | None = None
) -> Where:
    if namespace is None:
        return Where(kind=MEMORY_KIND, event_id=event_id)
    user = end_user(spec.token_id, namespace)
    return Where(kind=MEMORY_KIND, user=() if user is None else user, event_id=event_id)


def delete_where(
    memory: Any, spec: Mem0Spec, namespace: str, event_id: str | tuple[str, ...] | None = None
) -> list[StoredMemory]:
    """Delete through Mem0 (its history records each deletion) every memory of a namespace,
    or of one event's turn in it; the memories deleted."""
    store = memory.vector_store
    points = list(store.index.scroll(where(spec, namespace, event_id)))
    gone = []
    for point in points:
        memory.delete(point.id)
        gone.append(to_stored(spec.token_id, point))
    return gone


def clear_token(engine: VectorEngine, mem0_dir: Path, token_id: int) -> list[StoredMemory]:
    """Every memory of the token, in every embedding space it used, and Mem0's history,
    deleted (its episodic shards stay); the memories deleted."""
    gone: list[StoredMemory] = []
    for key in engine.shards(token_id):
        if key.model_id.startswith(MODEL_PREFIX):
            index = engine.index(key.token_id, key.model_id, key.dims)
            gone.extend(to_stored(token_id, p) for p in index.scroll(Where(kind=MEMORY_KIND)))
            index.delete_where(Where(kind=(MEMORY_KIND, ENTITY_KIND)))
    remove_history(mem0_dir, token_id)
    return gone


def purge_token(engine: VectorEngine, mem0_dir: Path, token_id: int) -> int:
    """The token's whole vector storage and Mem0's history, deleted; the shards dropped."""
    dropped = engine.drop_token(token_id)
    remove_history(mem0_dir, token_id)
    return dropped


def remove_history(mem0_dir: Path, token_id: int) -> None:
    history = history_path(mem0_dir, token_id)
    for path in history.parent.glob(history.name + "*"):
        path.unlink(missing_ok=True)


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def listing(index: VectorIndex, spec: Mem0Spec, namespace: str | None) -> list[StoredMemory]:
    """Every memory (of one namespace, or all), newest first."""
    items = [to_stored(spec.token_id, p) for p in index.scroll(where(spec, namespace))]
    items.sort(key=lambda m: (m.created_at or "", m.id), reverse=True)
    return items


def page(
    index: VectorIndex, spec: Mem0Spec, namespace: str | None, offset: int, limit: int
) -> tuple[list[StoredMemory], int]:
    """One page of the memories, in storage order, and how many there are: reading it costs
    its offset and size, not the whole namespace."""
    matching = where(spec, namespace)
    points = index.scroll(matching, batch=max(1, min(256, offset + limit)))
    items = [to_stored(spec.token_id, p) for p in islice(points, offset, offset + limit)]
    return items, index.count(matching)
