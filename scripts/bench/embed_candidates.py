"""Single-query embedding latency of the candidate local embedders, side by side: the product's
MiniLM path (`Embedders.local_query`, ONNX Runtime) and the packaged candidates of
`bench/recall_embedders.py`, alternating query by query in one OS thread, so every model sees
the same machine load. The recall stage is this plus the search (2-4 ms at 10,000 memories,
docs/performance.md), so it says which model can fit the 10 ms budget.

    python scripts/bench/embed_candidates.py --embedder-path /tmp/emb [--queries 300]
    M2V_MODEL=/tmp/m2v-model/pca256 python scripts/bench/embed_candidates.py \
        --embedders minilm,m2v --embedder-path /tmp/m2v    # a distilled static model

`--embedders` names the models to time (default: all of `bench/recall_embedders.py`'s).

Each query is new to every model (a trailing counter defeats the product's cache of recent
query vectors). Prints p50/p95/mean per model, and the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.locomo import DEFAULT_DATA, load, percentile
from bench.recall_embedders import CHOICES, packaged
from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.embedding.embedders import Embedders, default_spec

WARMUP = 10


async def _models(path: str | None, names: Sequence[str]) -> dict[str, Callable[[str], object]]:
    client = httpx.AsyncClient()
    executor = BlockingExecutor(1, "embed")
    out: dict[str, Callable[[str], object]] = {}
    for name in names:
        if name == "minilm":
            spec = default_spec("local")
            query = Embedders(client, executor).local_query(spec)
        else:
            candidate = packaged(name, path, client, executor)
            query = candidate.local_query(candidate.spec)
        assert query is not None
        out[name] = query
    await client.aclose()
    await executor.shutdown(5.0)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--embedders", default=",".join(CHOICES))
    parser.add_argument("--embedder-path", action="append", default=[])
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    for path in args.embedder_path:
        sys.path.insert(0, path)
    names = [n.strip() for n in args.embedders.split(",") if n.strip()]
    models = asyncio.run(_models(None, names))
    questions = [q.text for c in load(args.data) for q in c.questions]
    random.Random(7).shuffle(questions)  # noqa: S311 - a reproducible sample
    questions = questions[: args.queries + WARMUP]
    times: dict[str, list[float]] = {name: [] for name in models}
    load_before = os.getloadavg()[0]
    for n, text in enumerate(questions):
        for name, query in models.items():
            started = time.perf_counter()
            query(f"{text} {n}")
            if n >= WARMUP:
                times[name].append((time.perf_counter() - started) * 1000)
    load_after = os.getloadavg()[0]
    print(f"load average {load_before:.1f} before, {load_after:.1f} after")
    print("| embedder | queries | p50 ms | p95 ms | mean ms |")
    print("|---|---:|---:|---:|---:|")
    for name, values in times.items():
        mean = sum(values) / max(1, len(values))
        print(
            f"| {name} | {len(values)} | {percentile(values, 50):.1f} | "
            f"{percentile(values, 95):.1f} | {mean:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
