"""What a long-term memory search costs at 1,000 stored memories: before/after, one run.

    python scripts/bench/longterm_micro.py [--memories 1000] [--rounds 5] [--searches 100]

One `Mem0Pool` over embedded Qdrant (local mode) in a temporary directory, two tokens whose
embedder and memory LLM are `scripts/bench/fake_upstream.py` (started here: 64-dimension
vectors over HTTP; the model `bench-mem0` answers every extraction with one new fact), as in
`bench_proxy.py --with-memory`. Each token gets `--memories` memories (`Mem0Pool.add_raw`).
Token 1 is searched, in its token-wide namespace (`--users N` spreads its memories over N end
users and searches the first one's); nothing writes to it, so its collection holds exactly
`--memories` points throughout. Token 2 takes the writes. In interleaved rounds (the order
alternating, so drift and background noise hit both alike) each approach is timed on the same
storage:

- `before`: what qdrant-client's local mode does by itself: the namespace filter Mem0 sends is
  evaluated by the generic interpreter, point by point; SQLite's default rollback journal with
  `synchronous=FULL` for every committed point;
- `after`: MemoryBridge's local client (`sources/qdrant_store.py`): the namespace filter as
  one dictionary lookup per point, and WAL with `synchronous=NORMAL`.

Both are switched on the live collections (their class and SQLite pragmas), so the data, the
Mem0 instances and the process are the same. Rows:

- `pool.search, idle`: `Mem0Pool.search` (thread hop, query embedding over HTTP, Mem0's
  search, the filtered Qdrant query), one at a time, nothing else running;
- `pool.search, with writes`: the same while one Mem0 add (`infer=True`: embedding, filtered
  search, extraction call, upsert, history) runs continuously on token 2 — the same shared
  client, lock, threads and GIL, as every proxied request queues one; what it added is deleted
  after each round;
- `Qdrant filtered query`: the query Mem0 sends (limit 60, `user_id` filter) alone, on the
  shared client; `unfiltered` is the same without the filter (what a collection per end user
  would cost: the floor of any filter);
- `upsert (lock held)`: one single-point upsert on the shared client (token 2's collection),
  i.e. how long a background write holds the lock every search waits on.

Wall milliseconds, p50 and p95 over all rounds, and the before/after ratio of each round's p50
(median and range). The machine is whatever it is: compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from qdrant_client import models
from qdrant_client.local.local_collection import LocalCollection

from memory_bridge.sources import mem0_config
from memory_bridge.sources.mem0_pool import Mem0Pool, PoolPaths
from memory_bridge.sources.qdrant_store import FastFilterCollection
from memory_bridge.tenancy.config import TokenConfig

BENCH_DIR = Path(__file__).resolve().parent
DIMS = 64
APPROACHES = ("before", "after")
WRITER_NS = mem0_config.namespace(2, "")
TOPICS = (  # noqa: SIM905
    "coffee tea hiking cycling chess piano guitar painting cooking baking gardening "
    "travel japan italy mexico kenya norway python rust golf tennis sailing camping"
).split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_upstream() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, str(BENCH_DIR / "fake_upstream.py"), "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):  # noqa: S310 — loopback
                return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the fake upstream did not start") from None
            time.sleep(0.1)


def fact(i: int) -> str:
    a, b = TOPICS[i % len(TOPICS)], TOPICS[(i * 7 + 3) % len(TOPICS)]
    return f"Memory {i}: the user likes {a} and talks about {b} on day {i % 31}"


def query(i: int) -> str:
    return f"What does the user think about {TOPICS[i % len(TOPICS)]}?"


class Switch:
    """Puts the live collections in the `before` or `after` state."""

    def __init__(self, pool: Mem0Pool, collections: list[str]) -> None:
        client = pool._qdrant()
        self.client = client
        self.collections = collections
        self._backend: Any = client._client  # the serialising proxy of the local backend

    def use(self, approach: str) -> None:
        with self._backend._lock:
            for name in self.collections:
                local = self._backend._inner.collections[name]
                connection = local.storage.storage
                if approach == "before":
                    local.__class__ = LocalCollection
                    connection.execute("PRAGMA journal_mode=DELETE")
                    connection.execute("PRAGMA synchronous=FULL")
                else:
                    local.__class__ = FastFilterCollection
                    connection.execute("PRAGMA journal_mode=WAL")
                    connection.execute("PRAGMA synchronous=NORMAL")

    def drop_unseeded(self, collection: str) -> None:
        """Delete what the writer added (everything without the seed mark)."""
        seeded = models.FieldCondition(key="seed", match=models.MatchValue(value="1"))
        self.client.delete(
            collection,
            points_selector=models.FilterSelector(filter=models.Filter(must_not=[seeded])),
        )

    def count(self, collection: str) -> int:
        return self.client.count(collection).count


class Measure:
    """One round of every row for one approach; keeps the samples."""

    def __init__(
        self,
        args: argparse.Namespace,
        pool: Mem0Pool,
        spec: mem0_config.Mem0Spec,
        writer_spec: mem0_config.Mem0Spec,
        ns: str,
        switch: Switch,
        vector: list[float],
    ) -> None:
        self.args, self.pool, self.spec, self.ns = args, pool, spec, ns
        self.writer_spec, self.switch, self.vector = writer_spec, switch, vector
        self.filter = models.Filter(
            must=[models.FieldCondition(key="user_id", match=models.MatchValue(value=ns))]
        )
        self.samples: dict[tuple[str, str], list[float]] = {}
        self.round_p50: dict[tuple[str, str], list[float]] = {}
        self.found: dict[str, list[int]] = {a: [] for a in APPROACHES}

    def record(self, row: str, approach: str, values: list[float]) -> None:
        self.samples.setdefault((row, approach), []).extend(values)
        self.round_p50.setdefault((row, approach), []).append(statistics.median(values))

    async def round(self, approach: str) -> int:
        """Every row once; returns how many adds the writer made."""
        args, switch = self.args, self.switch
        self.switch.use(approach)

        async def search(i: int) -> None:
            found = await self.pool.search(self.spec, self.ns, query(i), args.limit)
            self.found[approach].append(len(found))

        self.record("pool.search, idle", approach, await timed(args.searches, search))

        stop = asyncio.Event()
        adds = 0

        async def writer() -> None:
            nonlocal adds
            while not stop.is_set():
                text = f"Please remember: {fact(100_000 + adds)}"
                message = [{"role": "user", "content": text}]
                await self.pool.add(self.writer_spec, WRITER_NS, message, None)
                adds += 1

        task = asyncio.create_task(writer())
        await asyncio.sleep(0.05)
        self.record("pool.search, with writes", approach, await timed(args.searches, search))
        stop.set()
        await task
        switch.drop_unseeded(self.writer_spec.collection)

        def filtered(_: int) -> None:
            switch.client.query_points(
                self.spec.collection, query=self.vector, query_filter=self.filter, limit=60
            )

        def unfiltered(_: int) -> None:
            switch.client.query_points(self.spec.collection, query=self.vector, limit=60)

        self.record("Qdrant filtered query", approach, timed_sync(args.searches, filtered))
        self.record("Qdrant unfiltered query", approach, timed_sync(args.searches, unfiltered))

        ids: list[str] = []

        def upsert(i: int) -> None:
            ids.append(str(uuid.uuid4()))
            payload = {"user_id": "bench-upsert", "data": fact(i)}
            point = models.PointStruct(id=ids[-1], vector=self.vector, payload=payload)
            switch.client.upsert(self.writer_spec.collection, points=[point])

        self.record("upsert (lock held)", approach, timed_sync(args.upserts, upsert))
        writes = self.writer_spec.collection
        switch.client.delete(writes, points_selector=models.PointIdsList(points=ids))
        return adds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def timed_sync(n: int, call: Callable[[int], Any]) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


async def run(args: argparse.Namespace, data_dir: Path, upstream_url: str) -> None:
    config = TokenConfig(
        name="bench-longterm",
        llm_base_url=upstream_url,
        memory_llm_provider="openai",
        memory_llm_base_url=upstream_url,
        memory_llm_body={"model": "bench-mem0"},
        embed_provider="openai",
        embed_base_url=upstream_url,
        embed_dims=DIMS,
        embed_body={"model": "bench-embed"},
    )
    mem0_dir = data_dir / "mem0"
    pool = Mem0Pool(
        PoolPaths(data_dir / "qdrant", "", "", mem0_dir),
        threads=4,
        embed_timeout=30.0,
        llm_timeout=30.0,
    )
    spec = mem0_config.build_spec(1, config, mem0_dir)
    writer_spec = mem0_config.build_spec(2, config, mem0_dir)
    users = [""] if args.users <= 1 else [f"user-{n}" for n in range(args.users)]
    namespaces = [mem0_config.namespace(1, u) for u in users]
    ns = namespaces[0]
    try:
        started = time.perf_counter()
        for target, spaces in ((spec, namespaces), (writer_spec, [WRITER_NS])):
            batch: list[tuple[str, dict[str, str]]] = []
            for i in range(args.memories):
                batch.append((fact(i), {"seed": "1"}))
                if len(batch) == 50 or i == args.memories - 1:
                    await pool.add_raw(target, spaces[(i // 50) % len(spaces)], batch)
                    batch = []
        print(
            f"seeded 2 x {args.memories} memories in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
        switch = Switch(pool, [spec.collection, writer_spec.collection])
        assert switch.count(spec.collection) == args.memories
        memory = pool.current(1)
        vector = memory.embedding_model.embed(query(0), "search")
        await pool.search(spec, ns, query(0), 5)  # warm-up

        bench = Measure(args, pool, spec, writer_spec, ns, switch, vector)
        for r in range(args.rounds):
            for approach in APPROACHES if r % 2 == 0 else APPROACHES[::-1]:
                adds = await bench.round(approach)
                idle = bench.round_p50[("pool.search, idle", approach)][-1]
                busy = bench.round_p50[("pool.search, with writes", approach)][-1]
                print(
                    f"round {r + 1}/{args.rounds} {approach}: search p50 {idle:.2f} ms idle, "
                    f"{busy:.2f} ms with {adds} adds",
                    file=sys.stderr,
                )
        switch.use("after")
        local: Any = switch.client._client._inner  # type: ignore[attr-defined]
        entries = len(local.collections[spec.collection].payload)  # live and deleted points
        assert entries == switch.count(spec.collection) == args.memories
    finally:
        await pool.close_all(timeout=30.0)

    print(
        f"\n{args.memories} memories in one collection ({len(namespaces)} namespace(s)), "
        f"{DIMS} dims, top {args.limit}; {args.rounds} rounds x {args.searches} searches "
        f"({args.upserts} upserts) per approach; ms\n"
    )
    print("| measurement | before p50 | before p95 | after p50 | after p95 | before/after (p50) |")
    print("|---|---|---|---|---|---|")
    for row in dict.fromkeys(key[0] for key in bench.samples):
        b, a = bench.samples[(row, "before")], bench.samples[(row, "after")]
        before, after = bench.round_p50[(row, "before")], bench.round_p50[(row, "after")]
        ratios = [x / y for x, y in zip(before, after, strict=True)]
        print(
            f"| {row} | {statistics.median(b):.2f} | {percentile(b, 0.95):.2f} "
            f"| {statistics.median(a):.2f} | {percentile(a, 0.95):.2f} "
            f"| {statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f}) |"
        )
    counts = {a: sorted(set(n)) for a, n in bench.found.items()}
    print(f"\nresults per search (both must agree): {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--users", type=int, default=1, help="spread over N end users")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--searches", type=int, default=100, help="per row, round and approach")
    parser.add_argument("--upserts", type=int, default=50)
    parser.add_argument("--limit", type=int, default=5, help="top k (memory_limit)")
    args = parser.parse_args()
    upstream, url = start_upstream()
    try:
        with tempfile.TemporaryDirectory(prefix="mb-longterm-") as tmp:
            asyncio.run(run(args, Path(tmp), url))
    finally:
        upstream.terminate()
        upstream.wait(10)


if __name__ == "__main__":
    main()
