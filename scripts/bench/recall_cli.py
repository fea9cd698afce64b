"""`bench_recall.py` from start to end: its command line, the quality and speed stages, the
report."""

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

from bench.locomo import DEFAULT_DATA, KS, load
from bench.recall_embedders import CHOICES
from bench.recall_entities import CHOICES as ENTITY_CHOICES
from bench.recall_entities import extractor
from bench.recall_report import REFERENCES, render

DESCRIPTION = (
    "Recall on LoCoMo: how well the product's episodic memory finds the evidence turns, "
    "and how fast."
)


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
    report: dict[str, Any] = {
        "data": str(args.data),
        "torch_threads": _torch_threads(),
        "embedder": args.embedder,
        "entities": args.entities,
    }
    if not args.skip_quality:
        variants = recall_variants.parse_variants(args.variants)
        found, bench = await recall_episodic.run(
            conversations,
            data_dir / "episodic",
            variants,
            args.limit_questions,
            args.embedder,
            args.embedder_path,
            args.off_topic,
            extractor(args.entities, args.entities_path),
        )
    else:
        bench = recall_episodic.EpisodicBench(
            data_dir / "episodic", args.embedder, args.embedder_path
        )
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
                # A candidate model has one runtime of its own: its name labels the rows.
                runtimes=args.runtimes if args.embedder == "minilm" else [args.embedder],
            )
    finally:
        await bench.close()
    if args.with_mem0 and not args.skip_quality:
        from bench import recall_mem0

        report["mem0"] = await recall_mem0.run(
            conversations, data_dir / "mem0", args.limit_questions, max(KS)
        )
    return report


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from bench.recall_variants import DEFAULT_VARIANTS

    parser = argparse.ArgumentParser(description=DESCRIPTION)
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
        help="speed: local embedder runtimes, query by query in turn (e.g. onnx,torch); "
        "onnx-walk: the same with the relational walk run (a token weighing it)",
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument(
        "--embedder",
        default="minilm",
        choices=CHOICES,
        help="the dense model (bench/recall_embedders.py): minilm is the product's default",
    )
    parser.add_argument(
        "--embedder-path", default=None, help="where a candidate's package is installed"
    )
    parser.add_argument(
        "--entities",
        default="rules",
        choices=ENTITY_CHOICES,
        help="entity extraction of the relational fetch (bench/recall_entities.py)",
    )
    parser.add_argument("--entities-path", default=None, help="where spaCy is installed")
    parser.add_argument(
        "--off-topic",
        default="product",
        choices=("product", "all", "none"),
        help="which variants are asked the other conversations' questions",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.skip_quality and not args.speed:
        parser.error("--skip-quality needs --speed")
    known = {"onnx", "torch", "onnx-walk", "torch-walk"}
    if not args.runtimes or set(args.runtimes) - known:
        parser.error("--runtimes: onnx and/or torch (each may be -walk: the relational walk)")
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
