"""How an embedded shard is laid out and asked: its engine config, payload indexes, filters,
the meta file that says what it holds, and the copy of its live points a compaction makes."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import qdrant_edge as qe

from memory_bridge.vectors.common import FLOAT_FIELDS, Bm25Settings
from memory_bridge.vectors.index import (
    DENSE,
    SPARSE,
    DimensionMismatch,
    NoRoom,
    ShardKey,
    VectorIndexError,
    Where,
)

if TYPE_CHECKING:
    from qdrant_edge import ConditionType

logger = logging.getLogger(__name__)

META = "meta.json"
META_SCHEMA = 1
SPARSE_FULL_SCAN = 1000


def edge_config(dims: int) -> qe.EdgeConfig:
    dense = {DENSE: qe.EdgeVectorParams(size=dims, distance=qe.Distance.Cosine)} if dims else None
    return qe.EdgeConfig(
        vectors=dense,
        # BM25 searches filter on one end user: above this many matching points the engine
        # walks the inverted index instead of scoring every point of the user: faster than
        # the engine's default for users of thousands of points, with the same scores (only
        # the order of equal ones may differ; docs/performance.md#figures-behind-code-choices).
        # Read at a shard's creation.
        sparse_vectors={
            SPARSE: qe.EdgeSparseVectorParams(
                modifier=qe.Modifier.Idf, full_scan_threshold=SPARSE_FULL_SCAN
            )
        },
        # Every search filters on one end user: no graph over the whole shard (m=0), one per
        # user (payload_m) once a user has more points than a full scan handles well. A global
        # graph costs far more to build; this one is built only for big users.
        hnsw_config=qe.HnswIndexConfig(
            m=0, ef_construct=100, full_scan_threshold=10_000, payload_m=16
        ),
    )


def index_params(name: str) -> qe.KeywordIndexParams | qe.FloatIndexParams:
    if name == "user":
        return qe.KeywordIndexParams(is_tenant=True)
    if name in FLOAT_FIELDS:
        return qe.FloatIndexParams(enable_hnsw=False)
    # No per-value graphs for the other fields: they would multiply the build's cost.
    return qe.KeywordIndexParams(enable_hnsw=False)


def edge_filter(where: Where) -> qe.Filter | None:
    must: list[ConditionType] = []
    for name, value in where.matchers():
        match = qe.MatchValue(value) if isinstance(value, str) else qe.MatchAny(list(value))
        must.append(qe.FieldCondition(name, match=match))
    if where.created_from is not None or where.created_before is not None:
        bounds = qe.RangeFloat(gte=where.created_from, lt=where.created_before)
        must.append(qe.FieldCondition("created_at", range=bounds))
    return qe.Filter(must=must) if must else None


def ranked(found: list[qe.ScoredPoint]) -> list[tuple[str, float]]:
    return [(str(p.id), p.score) for p in found]


def dense_of(vector: object) -> tuple[float, ...] | None:
    if isinstance(vector, dict):
        dense = vector.get(DENSE)
        if isinstance(dense, list):
            return tuple(float(x) for x in dense)
    return None


def ensure_room(path: Path, min_free: int) -> None:
    """Raise `NoRoom` when the file system of `path` (or of its nearest existing parent) has
    less than `min_free` bytes free for us."""
    if min_free <= 0:
        return
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < min_free:
        raise NoRoom(f"vector storage: {free >> 20} MiB free, below {min_free >> 20} MiB")


def settle_meta(home: Path, key: ShardKey, wanted: Bm25Settings) -> Bm25Settings:
    """Write meta.json for a new shard; for an existing one check it and keep its BM25."""
    path = home / META
    expect = {"token_id": key.token_id, "model_id": key.model_id, "dims": key.dims}
    if not path.exists():
        meta = {"schema": META_SCHEMA, **expect, "bm25": wanted.to_json()}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, path)
        return wanted
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise VectorIndexError(f"vector shard {home}: unreadable {META}") from exc
    found = {name: meta.get(name) for name in expect}
    if found != expect:
        raise DimensionMismatch(
            f"vector shard {home} holds {found}, not {expect}: refusing to mix them"
        )
    stored = Bm25Settings.from_json(meta.get("bm25"))
    if stored != wanted:
        # Its documents were tokenized with the stored settings; queries must match them.
        logger.warning(
            "vector shard %s keeps its BM25 settings %s (asked for %s): rebuild it to change",
            home,
            stored,
            wanted,
        )
    return stored


def copy_points(shard: qe.EdgeShard, target: Path, dims: int) -> None:
    """Every live point of `shard` (vectors, payload as stored) into a new shard at `target`."""
    fresh = qe.EdgeShard.create(str(target), edge_config(dims))
    try:
        offset: str | None = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=1000, with_payload=True, with_vector=True
            )
            records, next_id = shard.scroll(request)
            if records:
                points = [qe.Point(r.id, r.vector or {}, r.payload) for r in records]
                fresh.update(qe.UpdateOperation.upsert_points(points))
            if next_id is None:
                break
            offset = str(next_id)
        fresh.flush()
    finally:
        fresh.close()
