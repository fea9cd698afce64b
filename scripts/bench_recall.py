"""Recall on LoCoMo: how well the product's episodic memory finds the evidence turns, and how fast.

    python scripts/bench_recall.py --with-mem0 --json recall.json    # dev split, every variant
    python scripts/bench_recall.py --skip-quality --speed 10000,100000 --json speed.json
    python scripts/bench_recall.py --limit-conversations 1 --limit-questions 10   # smoke run

Quality (see `scripts/bench/recall_episodic.py`): for each conversation of
`../shared/data/locomo/locomo_dev.json` (relative to the repository; see that directory's README
for the data and the metric), one end user of one token whose embedder is the local
all-MiniLM-L6-v2; every exchange of every session goes, in order, through
`EpisodicMemory.remember` into an embedded Qdrant Edge shard in a temporary directory. Every
question of categories 1-4 goes through `EpisodicMemory.recall` and the Context Forge's `rank`
and `select`; what the forge injects (after its relevance floor and budget), in its order, is
scored, macro-averaged over questions:

- `turn@k`: fraction of the question's evidence turns among the top k (k = 5, 10, 20);
- `sess@k`: fraction of the evidence sessions covered by the sessions of the top-k turns;
- latency p50/p95 of the recall stage (`recall` + `rank` + `select`: query embedding included);
- injected tokens per request, and (product variant) the off-topic figures: each conversation's
  memory asked the OTHER conversations' questions, the share that got nothing injected.

The `product` variant passes no setting: it is what the proxy runs. The others (`--variants`)
set the fusion weights (engine and forge alike), BM25 of a message alone or in its context,
and "dated": messages stored at their session's date and ranked a day after the last session,
so the forge's recency term counts (otherwise every message is minutes old). `--with-mem0`
adds the long-term layer's Mem0 dense search as it ran before (`scripts/bench/recall_mem0.py`).

Speed (`--speed SIZES`, see `scripts/bench/recall_speed.py`): one end user's shard filled with
that many LoCoMo-like messages, the recall stage timed end to end, before and after
`optimize()`.

Prints Markdown tables; `--json` writes every figure. See docs/performance.md ("Recall on
LoCoMo").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.locomo import CATEGORIES, DEFAULT_DATA, KS, load, table

# The dataset README's figures on this split (all-MiniLM-L6-v2, 883 questions).
REFERENCES = {
    name: dict(zip(("turn@5", "turn@10", "turn@20", "sess@10"), figures, strict=True))
    for name, figures in (
        ("reference dense MiniLM", (0.393, 0.489, 0.581, 0.776)),
        ("reference BM25", (0.439, 0.517, 0.605, 0.831)),
        ("reference RRF hybrid", (0.483, 0.588, 0.682, 0.849)),
    )
}


def variants_table(variants: Sequence[dict[str, Any]]) -> str:
    cats = list(CATEGORIES.values())
    head = ["variant", "setting", *(f"turn@{k}" for k in KS), "sess@10"]
    head += [f"{c} turn@10" for c in cats] + ["tokens/req", "p50 ms", "p95 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in variants:
        o = v["overall"]
        cells = [v["name"], v["describe"], *(f"{o[f'turn@{k}']:.3f}" for k in KS)]
        cells.append(f"{o['sess@10']:.3f}")
        cells += [
            f"{v['by_category'][c]['turn@10']:.3f}" if c in v["by_category"] else "-" for c in cats
        ]
        cells += [f"{o['injected_tokens']:.0f}", f"{o['p50_ms']:.1f}", f"{o['p95_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def off_topic_table(product: dict[str, Any]) -> str:
    """On-topic (the conversation's own questions) against off-topic (the others')."""
    on, off = product["overall"], product["off_topic"]
    head = "| questions asked | n | nothing injected | injected tokens / request |"
    return "\n".join(
        [
            head,
            "|---|---|---|---|",
            f"| own conversation's | {on['questions']} | {on['nothing_injected']:.1%} "
            f"| {on['injected_tokens']:.0f} |",
            f"| other conversations' (off-topic) | {off['questions']} "
            f"| {off['nothing_injected']:.1%} | {off['injected_tokens']:.0f} |",
        ]
    )


def comparison(overall: dict[str, Any], mem0: dict[str, Any] | None) -> str:
    names = ["episodic (product)", *(["Mem0 dense (measured)"] if mem0 else []), *REFERENCES]
    lines = ["| figure | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for key in REFERENCES["reference dense MiniLM"]:
        cells = [f"{overall[key]:.3f}"]
        if mem0:
            cells.append(f"{mem0['overall'][key]:.3f}")
        cells += [f"{ref[key]:.3f}" for ref in REFERENCES.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _torch_threads() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return int(torch.get_num_threads())


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from bench import recall_episodic, recall_speed, recall_variants

    conversations = load(args.data)
    if args.limit_conversations is not None:
        conversations = conversations[: args.limit_conversations]
    report: dict[str, Any] = {"data": str(args.data), "torch_threads": _torch_threads()}
    if not args.skip_quality:
        variants = recall_variants.parse_variants(args.variants)
        found, bench = await recall_episodic.run(
            conversations, data_dir / "episodic", variants, args.limit_questions
        )
    else:
        bench = recall_episodic.EpisodicBench(data_dir / "episodic")
    try:
        if not args.skip_quality:
            product = found["variants"][0]
            report.update(
                pipeline=found["pipeline"],
                conversations=product["conversations"],
                overall=product["overall"],
                by_category=product["by_category"],
                variants=found["variants"],
                ingest=found["ingest"],
                references=REFERENCES,
            )
        if args.speed:
            sizes = [int(s) for s in args.speed.split(",") if s.strip()]
            report["speed"] = await recall_speed.run(
                bench,
                conversations,
                sizes,
                args.speed_queries,
                args.speed_budget,
                optimize=not args.no_optimize,
                runtimes=args.runtimes,
            )
    finally:
        await bench.close()
    if args.with_mem0 and not args.skip_quality:
        from bench import recall_mem0

        report["mem0"] = await recall_mem0.run(
            conversations, data_dir / "mem0", args.limit_questions, max(KS)
        )
    return report


def render(report: dict[str, Any]) -> str:
    parts = []
    if "overall" in report:
        rows = [*report["conversations"].items(), ("**overall**", report["overall"])]
        parts += [
            table(rows, "conversation"),
            table(list(report["by_category"].items()), "category"),
            variants_table(report["variants"]),
            off_topic_table(report["variants"][0]),
            comparison(report["overall"], report.get("mem0")),
        ]
        if "mem0" in report:
            mem0 = report["mem0"]
            parts.append(
                table(
                    [("Mem0 dense", mem0["overall"]), *mem0["by_category"].items()],
                    "Mem0 (before)",
                )
            )
    if "speed" in report:
        from bench import recall_speed

        parts.append(recall_speed.table(report["speed"]))
    return "\n\n".join(parts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from bench.recall_variants import DEFAULT_VARIANTS

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo_dev.json")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None, help="per conversation")
    parser.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help="besides `product`: [ctx|plain]-<dense>/<sparse>[-dated], comma-separated",
    )
    parser.add_argument("--with-mem0", action="store_true", help="also Mem0's dense search")
    parser.add_argument("--skip-quality", action="store_true", help="only the speed stage")
    parser.add_argument("--speed", default="", help="memories per speed cell, e.g. 10000,100000")
    parser.add_argument("--speed-queries", type=int, default=300)
    parser.add_argument("--speed-budget", type=float, default=120.0, help="seconds per cell")
    parser.add_argument("--no-optimize", action="store_true", help="speed: skip optimize()")
    parser.add_argument(
        "--runtimes",
        type=lambda raw: [part.strip() for part in raw.split(",") if part.strip()],
        default=["onnx"],
        help="speed: local embedder runtimes, query by query in turn (e.g. onnx,torch)",
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.skip_quality and not args.speed:
        parser.error("--skip-quality needs --speed")
    if not args.runtimes or set(args.runtimes) - {"onnx", "torch"}:
        parser.error("--runtimes: onnx and/or torch")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file():
        print(f"no LoCoMo data at {args.data}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if not args.verbose:
        logging.getLogger("mem0").setLevel(logging.ERROR)
    if args.torch_threads is not None:
        import torch

        torch.set_num_threads(args.torch_threads)
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        os.environ.setdefault("MEM0_DIR", str(Path(tmp) / "mem0"))
        report = asyncio.run(run(args, Path(tmp)))
    text = render(report)
    report["table"] = text
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
