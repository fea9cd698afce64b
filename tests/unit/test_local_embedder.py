"""The local embedder with the packaged MiniLM: a short call (one torch thread, maybe from the
recent-vector cache) gives the vectors a batch on torch's default threads gives, as fresh
lists, and the cache stays bounded."""

from __future__ import annotations

import math

import pytest

from memory_bridge.sources import local_embedder
from memory_bridge.sources.local_embedder import (
    DEFAULT_DIMS,
    RECENT,
    SHORT_CALL,
    LocalEmbedding,
    LocalModel,
)

pytestmark = pytest.mark.skipif(
    not local_embedder.local_extra_installed(), reason="needs the local extra"
)


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_short_calls_match_a_batch_and_the_cache_is_bounded() -> None:
    embedding = LocalEmbedding(LocalModel(path=""), DEFAULT_DIMS)
    texts = [f"When did Caroline visit museum number {i}?" for i in range(SHORT_CALL + 1)]
    batch = embedding.embed_batch(texts)  # more than SHORT_CALL: torch's default threads
    first = embedding.embed(texts[0])
    assert _cosine(first, batch[0]) > 0.99999
    for _ in range(2):  # the caller owns what it got: the cached vector is not touched
        cached = embedding.embed(texts[0])
        assert cached == first
        cached[0] += 1.0
    assert embedding.embed(texts[1]) != first  # keyed by the text

    for i in range(RECENT + 5):
        embedding.embed(f"a distinct question {i}")
    loaded = local_embedder._models[LocalModel(path="")]
    assert len(loaded.recent) == RECENT
    assert _cosine(embedding.embed(texts[0]), batch[0]) > 0.99999  # evicted, recomputed
