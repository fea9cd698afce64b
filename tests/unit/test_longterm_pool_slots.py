"""Scheduling in the Mem0 pool: background writes never take every memory thread."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.mem0_store import Found
from memory_bridge.sources.longterm.pool import Mem0Pool
from memory_bridge.tenancy.config import validate_config
from memory_bridge.vectors.edge import EdgeEngine


class _SlowWrites:
    """Stands in for a Mem0 instance: adds block until the gate opens; searches answer."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.adding = 0
        self.lock = threading.Lock()

    def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            self.adding += 1
        self.gate.wait(10)
        return {"results": [{"id": "1"}]}

    @property
    def embedding_model(self) -> Any:
        return self  # the pool's search embeds with it, then asks `vector_store`

    @property
    def vector_store(self) -> Any:
        return self

    def embed(self, text: str, action: str) -> list[float]:
        return [1.0] * 8

    def search(self, query: str, vectors: Any, top_k: int, filters: Any) -> list[Found]:
        return [Found("m1", {"data": query, "user_id": filters["user_id"]}, 1.0)]

    def close(self) -> None:
        pass


async def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_writes_leave_a_thread_for_recall(tmp_path: Path) -> None:
    engine = EdgeEngine(tmp_path / "data")  # never opened: the instance stands in for Mem0
    pool = Mem0Pool(engine, tmp_path / "mem0", threads=2, embed_timeout=5, llm_timeout=5)
    memory = _SlowWrites()
    pool._construct = lambda spec: memory  # type: ignore[method-assign]
    config = validate_config(
        {
            "name": "t",
            "llm_base_url": "http://127.0.0.1:9",
            "memory_llm_provider": "openai",
            "memory_llm_base_url": "http://127.0.0.1:9",
            "embed_provider": "openai",
            "embed_base_url": "http://127.0.0.1:9",
            "embed_dims": 8,
        }
    )
    spec = mem0_config.build_spec(1, config, pool.mem0_dir)
    message = [{"role": "user", "content": "hi"}]
    try:
        # Three end users' adds at once; with two threads only one may write.
        adds = [
            asyncio.create_task(pool.add(spec, mem0_config.namespace(1, u), message, None))
            for u in ("a", "b", "c")
        ]
        await _until(lambda: memory.adding >= 1, "the first add")
        await asyncio.sleep(0.05)
        assert memory.adding == 1  # the others wait for the writer slot, not for a thread
        found = await asyncio.wait_for(pool.search(spec, "t1:ua", "hello", 5), 5)
        assert [m.text for m in found] == ["hello"]

        # A caller that gives up does not free the slot while its thread is still writing.
        adds[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await adds[0]
        await asyncio.sleep(0.05)
        assert memory.adding == 1
        memory.gate.set()
        assert [len((await add)[1]) for add in adds[1:]] == [1, 1]
        assert memory.adding == 3 and pool.executor.busy == 0
    finally:
        memory.gate.set()
        await pool.close_all(5)
        engine.close()
