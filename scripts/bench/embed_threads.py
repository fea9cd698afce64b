"""Single-query embedding with the packaged MiniLM: the product's local embedder (one torch
thread for short calls) against a plain `SentenceTransformer.encode` on torch's default thread
count, alternating query by query in one OS thread, so both see the same machine load.

    python scripts/bench/embed_threads.py [--queries 300]

Prints p50/p95 per variant and the smallest cosine between the two variants' vectors (the
product's path must not move the vectors). Needs the `local` extra and the LoCoMo dev split.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.locomo import DEFAULT_DATA, load, percentile
from memory_bridge.embedding.local import (
    DEFAULT_DIMS,
    LocalEmbedding,
    LocalModel,
    default_model_path,
)

WARMUP = 10


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    questions = [q.text for c in load(args.data) for q in c.questions]
    random.Random(7).shuffle(questions)  # noqa: S311 - a reproducible sample
    questions = questions[: args.queries + WARMUP]
    default_threads = torch.get_num_threads()
    plain = SentenceTransformer(default_model_path(), device="cpu")
    product = LocalEmbedding(LocalModel(path=""), DEFAULT_DIMS)

    def plain_encode(text: str) -> list[float]:
        torch.set_num_threads(default_threads)
        vector: list[float] = plain.encode([text], convert_to_numpy=True)[0].tolist()
        return vector

    variants: dict[str, Callable[[str], list[float]]] = {
        f"plain encode, {default_threads} torch threads": plain_encode,
        "product LocalEmbedding.embed": product.embed,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    worst = 1.0
    load_before = os.getloadavg()[0]
    for n, text in enumerate(questions):
        vectors = []
        for name, embed in variants.items():
            started = time.perf_counter()
            vectors.append(np.asarray(embed(text)))
            if n >= WARMUP:
                times[name].append((time.perf_counter() - started) * 1000)
        a, b = vectors
        worst = min(worst, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    for name, values in times.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        print(f"{name:40s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ({len(values)} queries)")
    print(f"smallest cosine between the variants: {worst:.7f}")
    print(f"load average 1 min: {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
