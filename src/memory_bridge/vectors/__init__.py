"""The vector engine layer: one small index interface and two adapters.

- `vectors.index`: the interface (`VectorEngine`, `VectorIndex`) and its values;
- `vectors.edge.EdgeEngine`: embedded Qdrant Edge shards in the data directory (default);
- `vectors.server.ServerEngine`: a Qdrant server (or qdrant-client's local mode) instead.

Only the interface is imported here, so that importing it loads neither engine.
"""

from memory_bridge.vectors.index import (
    DimensionMismatch,
    HybridHit,
    IndexClosed,
    IndexStats,
    NoRoom,
    PointPayload,
    ShardKey,
    StoredPoint,
    VectorEngine,
    VectorIndex,
    VectorIndexError,
    VectorPoint,
    Where,
)

__all__ = [
    "DimensionMismatch",
    "HybridHit",
    "IndexClosed",
    "IndexStats",
    "NoRoom",
    "PointPayload",
    "ShardKey",
    "StoredPoint",
    "VectorEngine",
    "VectorIndex",
    "VectorIndexError",
    "VectorPoint",
    "Where",
]
