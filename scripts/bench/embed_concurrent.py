"""Concurrent recall queries through the local embedder: texts/s, latency and CPU per text.

    python scripts/bench/embed_concurrent.py [--baseline-src DIR] [--threads 1,2,4,8]
        [--lanes 1,2] [--queries 400]

`--threads` callers each embed distinct short questions (~15 word pieces, like a recall
query) one at a time through `LocalEmbedding.embed`, the product's path for a request's
query, for `--queries` texts in all. For each thread count the trees run in turn, each in a
fresh process (this tree once per `--lanes` value: `local.QUERY_LANES`), so they see the same
machine load. Prints texts/s, p50 / p95 ms per call and the process's CPU ms per text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.trees import call_in_tree, source_trees

SUBJECTS = ("Caroline", "the team", "my sister", "our neighbour", "the old professor", "Tom")
VERBS = ("say about", "think of", "plan for", "remember from", "decide on", "learn at")
OBJECTS = (
    "the trip to Lisbon",
    "the pottery class",
    "the support group",
    "the new job",
    "her adoption plans",
    "the charity run",
    "last summer's camping",
    "the book club",
)


def question(n: int) -> str:
    subject = SUBJECTS[n % len(SUBJECTS)]
    verb = VERBS[(n // len(SUBJECTS)) % len(VERBS)]
    thing = OBJECTS[(n // 7) % len(OBJECTS)]
    return f"What did {subject} {verb} {thing}, question {n}?"  # distinct: no cache hit


def measure(threads: int, queries: int, lanes: int | None) -> dict[str, float]:
    from memory_bridge.embedding import local

    if lanes is not None:
        local.QUERY_LANES = lanes  # read when the model loads, below
    embedding = local.LocalEmbedding(local.LocalModel(path=""), local.DEFAULT_DIMS)
    for n in range(8):
        embedding.embed(f"warm-up {n}")
    per_thread = queries // threads
    times: list[float] = []
    lock = threading.Lock()

    def caller(offset: int) -> None:
        mine = []
        for n in range(per_thread):
            started = time.perf_counter()
            embedding.embed(question(offset * per_thread + n))
            mine.append((time.perf_counter() - started) * 1000)
        with lock:
            times.extend(mine)

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    cpu, wall = time.process_time(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    times.sort()
    return {
        "texts_per_s": len(times) / wall,
        "p50_ms": statistics.median(times),
        "p95_ms": times[int(len(times) * 0.95) - 1],
        "cpu_ms_per_text": cpu * 1000 / len(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", help="a second tree to measure side by side")
    parser.add_argument("--threads", default="1,2,4,8", help="concurrent callers, comma-separated")
    parser.add_argument("--lanes", default="", help="this tree's QUERY_LANES values to compare")
    parser.add_argument("--queries", type=int, default=400, help="texts per measurement")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    trees = source_trees(args.baseline_src)
    runs: dict[str, tuple[str, int | None]] = {}
    for lanes in [int(x) for x in args.lanes.split(",") if x] or [None]:
        name = "this tree" if lanes is None else f"this tree, {lanes} lane(s)"
        runs[name] = (trees["this tree"], lanes)
    if "baseline" in trees:
        runs["baseline"] = (trees["baseline"], None)
    rows = []
    print("| callers | run | texts/s | p50 ms | p95 ms | CPU ms / text |")
    print("|---|---|---|---|---|---|")
    for threads in [int(x) for x in args.threads.split(",")]:
        for name, (src, lanes) in runs.items():
            call = f"m.json.dumps(m.measure({threads}, {args.queries}, {lanes!r}))"
            f = json.loads(call_in_tree(src, Path(__file__), call))
            rows.append({"threads": threads, "run": name, **f})
            print(
                f"| {threads} | {name} | {f['texts_per_s']:.0f} | {f['p50_ms']:.1f} | "
                f"{f['p95_ms']:.1f} | {f['cpu_ms_per_text']:.1f} |",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
