"""The local embedder's cost per text length: one text at a time, the product's path.

    python scripts/bench/embed_lengths.py [--baseline-src DIR] [--repeats 15]

Embeds texts of 90 to 4,000 characters (English prose, ~5 characters per word piece) with the
packaged MiniLM through `LocalEmbedding`, as a request's query is embedded, and prints the p50
milliseconds per length. With `--baseline-src`, the same runs in a second process on the code
under DIR/src (e.g. a worktree of the commit before), length by length in turn, so both see the
same machine load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.trees import call_in_tree, source_trees

HERE = Path(__file__)

SENTENCE = "The quarterly report shows revenue grew in the northern region while costs fell. "
REPEATS = (1, 3, 6, 12, 45)  # 89 to ~4,000 characters


def measure(repeats: int, count: int) -> float:
    """p50 ms of embedding a text of `repeats` sentences, each call a distinct text."""
    from memory_bridge.embedding.local import DEFAULT_DIMS, LocalEmbedding, LocalModel

    embedding = LocalEmbedding(LocalModel(path=""), DEFAULT_DIMS)
    embedding.embed("warm-up")
    times = []
    for i in range(count):
        text = f"{i} {SENTENCE * repeats}"  # distinct: the recent-vector cache never answers
        started = time.perf_counter()
        embedding.embed(text)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", help="a second tree to measure side by side")
    parser.add_argument("--repeats", type=int, default=15, help="texts per length")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    trees = source_trees(args.baseline_src)
    rows = []
    print("| characters | " + " | ".join(f"{name} p50 ms" for name in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for repeats in REPEATS:
        call = f"m.measure({repeats}, {args.repeats})"
        figures = {name: float(call_in_tree(src, HERE, call)) for name, src in trees.items()}
        chars = len(f"0 {SENTENCE * repeats}")
        rows.append({"characters": chars, **figures})
        print(
            f"| {chars:,} | " + " | ".join(f"{v:.1f}" for v in figures.values()) + " |", flush=True
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
