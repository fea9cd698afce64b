"""Recall-stage speed at scale (`scripts/bench_recall.py --speed 10000,100000`): one end user's
episodic shard filled with N LoCoMo-like messages, then `EpisodicMemory.recall` + the forge's
`rank` timed end to end, query embedding with the local MiniLM included.

Fill: synthetic messages cycling through the development split's 3,435 turns, the speaker's
name numbered by the pass (`"Caroline3: <text>"`), handed to
`EpisodicMemory.remember` 64 messages per exchange (one embedding batch and one upsert per
call, each message BM25-indexed with the one before it, as the product does). Embedding 100,000
texts with MiniLM on two shared cores would take over an hour, so the fill's embedder returns
the MiniLM vector of the turn a message was made from, jittered (Gaussian noise, cosine ~0.95
to it): the vectors keep the real model's distribution, and the latency of a filtered search
does not depend on what they mean. Every query is embedded by the real embedder.

Each size is measured on the shard as filled, then again after `optimize()` (the worker's job
in the product, off the request path; its wall time is reported). The fill grows one shard:
the 100,000 case adds to the 10,000 one. Per query, also timed apart: the query embedding alone
and `hybrid_search` alone (the thread hop included in each).
"""

from __future__ import annotations

import os
import random
import sys
import time
import zlib
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from bench.locomo import Conversation, Turn, percentile
from bench.recall_episodic import TIMEOUT, EpisodicBench
from memory_bridge.context.forge.rank import rank
from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Reply, Scope
from memory_bridge.core.turn import Turn as ChatTurn
from memory_bridge.embedding import local as local_embedder
from memory_bridge.embedding.embedders import Embedders, EmbedderSpec
from memory_bridge.sources.base import Exchange
from memory_bridge.sources.episodic import DEPTH, PREFETCH, EpisodicMemory
from memory_bridge.sources.episodic_points import KIND
from memory_bridge.tenancy.ranking import Ranking
from memory_bridge.vectors.index import VectorIndex, Where

TOKEN = 1000  # apart from the quality stage's tokens
USER = "speed-user"
BATCH = 64  # messages per exchange: one embedding batch of `Embedders` (MAX_BATCH)
JITTER = 0.0165  # per coordinate: |noise| ~ 0.32, cosine ~0.95 to the base vector (384 d)
WARMUP = 5


class JitterEmbedders(Embedders):
    """For the fill only: a message's vector is its base turn's MiniLM vector, jittered."""

    def __init__(
        self, client: httpx.AsyncClient, executor: BlockingExecutor, bases: dict[str, list[float]]
    ) -> None:
        super().__init__(client, executor)
        self._bases = {body: np.asarray(v, dtype=np.float64) for body, v in bases.items()}

    async def embed(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = self._bases[text.split(": ", 1)[1].strip()]
            rng = np.random.default_rng(zlib.crc32(text.encode()))
            jittered = vector + rng.normal(0.0, JITTER, vector.shape)
            out.append((jittered / np.linalg.norm(jittered)).tolist())
        return out


def _body(turn: Turn) -> str:
    """The turn's text without "<speaker>: " (and stripped, as `remember` strips it)."""
    return turn.text[len(turn.speaker) + 2 :].strip()


def synthetic(turns: Sequence[Turn], start: int, stop: int) -> list[str]:
    out = []
    for i in range(start, stop):
        base = turns[i % len(turns)]
        copy = i // len(turns)
        name = f"{base.speaker}{copy}" if copy else base.speaker
        out.append(f"{name}: {_body(base)}")
    return out


async def _fill(
    memory: EpisodicMemory, bench: EpisodicBench, turns: Sequence[Turn], start: int, stop: int
) -> None:
    for at in range(start, stop, BATCH):
        texts = synthetic(turns, at, min(stop, at + BATCH))
        new = tuple(
            Message(role="user" if (at + j) % 2 == 0 else "assistant", content=t)
            for j, t in enumerate(texts[:-1])
        )
        event_id = f"fill-{at}"
        scope = Scope(token_id=TOKEN, user=USER, session=f"s{at // 1000}")
        turn = ChatTurn(event_id, scope, bench.config, new, texts[0])
        exchange = Exchange(turn, new, Reply(content=texts[-1]), event_id=event_id)
        await memory.remember(exchange)


def _stats(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(values, 50), 2), "p95_ms": round(percentile(values, 95), 2)}


async def _measure(
    bench: EpisodicBench,
    index: VectorIndex,
    questions: Sequence[str],
    budget: float,
    runtimes: Sequence[str],
) -> dict[str, Any]:
    """Per local-embedder runtime, query by query in turn (the same load for each). A runtime
    named "<runtime>-walk" is the same with the relational walk run for every question (as
    for a token whose `graphWeight` > 0; the product's default runs none): the walk's cost
    side by side."""
    memories = {
        walk: EpisodicMemory(
            bench.engine,
            bench.embedders,
            bench.executor,
            TIMEOUT,
            TIMEOUT,
            default_embedder=bench.spec,
            entities=bench.entities,
            walk=True if walk else None,
        )
        for walk in (True, False)
    }
    scope = Scope(token_id=TOKEN, user=USER, session="ask")
    times: dict[str, dict[str, list[float]]] = {
        rt: {"recall": [], "embed": [], "search": []} for rt in runtimes
    }
    hits: list[int] = []
    load = os.getloadavg()[0]
    deadline = time.monotonic() + budget
    for n, text in enumerate(questions):
        if n >= WARMUP and time.monotonic() > deadline:
            break
        for i, runtime in enumerate(runtimes):
            engine = runtime.removesuffix("-walk")
            memory = memories[runtime.endswith("-walk")]
            if engine in ("onnx", "torch"):  # else: a candidate's name (one runtime of its own)
                local_embedder.use_runtime(engine)  # type: ignore[arg-type]
            # Each runtime asks its own spelling of the question (" ." added per runtime): the
            # local embedder keeps recent query vectors, so the second runtime asking the same
            # text would time the cache, not its model.
            asked = text + " ." * i
            turn = ChatTurn("q", scope, bench.config, (Message(role="user", content=asked),), asked)
            t0 = time.perf_counter()
            found = await memory.recall(turn)
            ranked = rank(found.candidates, Ranking(), time.time())
            t1 = time.perf_counter()
            # Yet another spelling: not a vector the embedder keeps from the recalls above (its
            # cache key strips whitespace, so a trailing space hit it and timed the cache).
            (vector,) = await bench.embedders.embed(bench.spec, [text + " ." * (len(runtimes) + i)])
            t2 = time.perf_counter()
            await bench.executor.run(
                lambda: index.hybrid_search(
                    user=USER,
                    query_dense=vector,  # noqa: B023 - awaited before the loop moves on
                    query_text=text,  # noqa: B023
                    where=Where(user=USER, kind=KIND),
                    limit=DEPTH,
                    prefetch_limit=PREFETCH,
                )
            )
            t3 = time.perf_counter()
            if n < WARMUP:
                continue
            times[runtime]["recall"].append((t1 - t0) * 1000)
            times[runtime]["embed"].append((t2 - t1) * 1000)
            times[runtime]["search"].append((t3 - t2) * 1000)
            hits.append(len(ranked))
    first = runtimes[0].removesuffix("-walk")
    if first in ("onnx", "torch"):
        local_embedder.use_runtime(first)  # type: ignore[arg-type]
    return {
        "queries": len(times[runtimes[0]]["recall"]),
        "runtimes": {
            rt: {stage: _stats(values) for stage, values in stages.items()}
            for rt, stages in times.items()
        },
        "mean_candidates": round(sum(hits) / max(1, len(hits)), 1),
        "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


async def _row(
    bench: EpisodicBench,
    filler: EpisodicMemory,
    index: VectorIndex,
    turns: list[Turn],
    have: int,
    size: int,
    questions: list[str],
    budget: float,
    runtimes: Sequence[str],
    optimize: bool,
) -> dict[str, Any]:
    """The shard filled from `have` to `size` memories; recall timed as filled, then optimised."""
    started = time.perf_counter()
    await _fill(filler, bench, turns, have, size)
    fill_s = time.perf_counter() - started
    count = index.count(Where(user=USER))
    assert count == size, (count, size)
    row: dict[str, Any] = {
        "memories": size,
        "fill_s": round(fill_s, 1),
        "fill_per_s": round((size - have) / fill_s),
    }
    print(f"speed: {size} memories filled in {fill_s:.1f} s", file=sys.stderr, flush=True)
    row["as_filled"] = await _measure(bench, index, questions, budget, runtimes)
    row["as_filled"]["segments"] = index.stats().segments
    print(f"speed: {size} as filled {row['as_filled']['runtimes']}", file=sys.stderr, flush=True)
    if optimize:
        started = time.perf_counter()
        changed = await bench.executor.run(index.optimize)
        row["optimize_s"] = round(time.perf_counter() - started, 1)
        row["optimize_changed"] = changed
        row["optimized"] = await _measure(bench, index, questions, budget, runtimes)
        stats = index.stats()
        row["optimized"]["segments"] = stats.segments
        row["optimized"]["indexed_vectors"] = stats.indexed_vectors
        print(
            f"speed: {size} optimised in {row['optimize_s']} s {row['optimized']['runtimes']}",
            file=sys.stderr,
            flush=True,
        )
    return row


async def run(
    bench: EpisodicBench,
    conversations: Sequence[Conversation],
    sizes: Sequence[int],
    queries: int,
    budget: float,
    optimize: bool,
    runtimes: Sequence[str] = ("onnx",),
    seed: int = 7,
) -> dict[str, Any]:
    turns = [t for c in conversations for t in c.turns]
    bases = dict(
        zip(
            (_body(t) for t in turns),
            await bench.caching.embed(bench.spec, [t.text for t in turns]),
            strict=True,
        )
    )
    filler = EpisodicMemory(
        bench.engine,
        JitterEmbedders(bench.client, bench.executor, bases),
        bench.executor,
        TIMEOUT,
        TIMEOUT,
        default_embedder=bench.spec,
    )
    questions = [q.text for c in conversations for q in c.questions]
    random.Random(seed).shuffle(questions)  # noqa: S311 - a reproducible sample
    questions = questions[: queries + WARMUP]
    index = bench.engine.index(TOKEN, bench.spec.model_id, bench.spec.dims)
    rows: list[dict[str, Any]] = []
    have = 0
    for size in sorted(sizes):
        rows.append(
            await _row(
                bench, filler, index, turns, have, size, questions, budget, runtimes, optimize
            )
        )
        have = size
    return {
        "fill": (
            f"LoCoMo dev turns, renamed per pass; {bench.spec.model_id} vectors of the base "
            "turn, jittered"
        ),
        "rows": rows,
    }


def table(report: dict[str, Any]) -> str:
    head = (
        "| memories | shard | embedder runtime | recall p50 ms | p95 ms | embed p50 | p95 | "
        "search p50 | p95 | queries | load 1m |"
    )
    lines = [head, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in report["rows"]:
        states = [("as filled", row["as_filled"])]
        if "optimized" in row:
            states.append((f"optimised ({row['optimize_s']:.0f} s)", row["optimized"]))
        for name, m in states:
            load = "–".join(f"{x:.1f}" for x in m["load_avg_1m"])
            for runtime, r in m["runtimes"].items():
                lines.append(
                    f"| {row['memories']:,} | {name} | {runtime} | {r['recall']['p50_ms']:.1f} | "
                    f"{r['recall']['p95_ms']:.1f} | {r['embed']['p50_ms']:.1f} | "
                    f"{r['embed']['p95_ms']:.1f} | {r['search']['p50_ms']:.1f} | "
                    f"{r['search']['p95_ms']:.1f} | {m['queries']} | {load} |"
                )
    return "\n".join(lines)
