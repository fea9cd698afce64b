"""Start-up warms no more embedded shards than may stay open (the rest would close others)."""

from __future__ import annotations

from memory_bridge.http.readiness import _warm_limit
from memory_bridge.settings import Settings


def test_the_warm_up_opens_no_more_shards_than_the_bound() -> None:
    assert _warm_limit(Settings(ready_warm_shards=64, vector_max_open_shards=32)) == 32
    assert _warm_limit(Settings(ready_warm_shards=8, vector_max_open_shards=32)) == 8
    assert _warm_limit(Settings(ready_warm_shards=64, vector_max_open_shards=0)) == 64


def test_a_qdrant_server_keeps_no_shard_open_here() -> None:
    remote = Settings(ready_warm_shards=64, vector_max_open_shards=2, qdrant_url="http://q:6333")
    assert _warm_limit(remote) == 64
