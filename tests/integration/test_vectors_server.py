"""What only the server adapter does: collection names and the metadata that guards them."""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient, models

from memory_bridge.vectors import DimensionMismatch, ShardKey
from memory_bridge.vectors.common import Bm25Settings
from memory_bridge.vectors.server import ServerEngine
from tests.integration.test_vectors_adapters import point, unit


def test_one_collection_per_token_model_and_size() -> None:
    engine = ServerEngine(QdrantClient(location=":memory:"), serialize=True, prefix="mbx")
    try:
        name = engine.collection_name(ShardKey(7, "text-embedding-3-small", 384))
        assert name.startswith("mbx_t7_text-embedding-3-small-")
        assert name.endswith("-d384")
        assert engine.index(7, "text-embedding-3-small", 384).name == name
    finally:
        engine.close()


@pytest.mark.parametrize(
    "metadata", [None, {"memory_bridge": {"token_id": 1, "model_id": "m", "dims": 4}}]
)
def test_a_collection_made_for_something_else_is_refused(
    metadata: dict[str, object] | None,
) -> None:
    client = QdrantClient(location=":memory:")
    engine = ServerEngine(client, serialize=True)
    name = engine.collection_name(ShardKey(1, "m", 8))
    client.create_collection(
        name,
        vectors_config={"dense": models.VectorParams(size=8, distance=models.Distance.COSINE)},
        metadata=metadata,
    )
    try:
        with pytest.raises(DimensionMismatch, match="holds"):
            engine.index(1, "m", 8)
    finally:
        engine.close()


def test_an_existing_collection_is_reused_with_its_settings() -> None:
    client = QdrantClient(location=":memory:")
    first = ServerEngine(client, serialize=True, bm25=Bm25Settings(avg_len=10))
    first.index(1, "m", 8).upsert([point("running shoes", unit(0))])
    second = ServerEngine(client, serialize=True)
    try:
        index = second.index(1, "m", 8)
        assert index.count() == 1
        hits = index.hybrid_search(user="u1", query_dense=None, query_text="run")
        assert [h.payload.text for h in hits] == ["running shoes"]
        assert index.optimize() is False  # a server optimises by itself
        assert index.stats().points == 1
    finally:
        second.close()
