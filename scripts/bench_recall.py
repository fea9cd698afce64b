"""Long-term recall on LoCoMo: how well the long-term memory layer finds the evidence turns.

    python scripts/bench_recall.py                                   # full dev split
    python scripts/bench_recall.py --limit-conversations 1 --limit-questions 10 --json out.json

For each conversation of `../shared/data/locomo/locomo_dev.json` (relative to the repository;
see that directory's README for the data and the metric), every turn is stored as one raw
memory (`Mem0Pool.add_raw`: Mem0's `infer=False`, so no LLM) of one token whose embedder is the
local all-MiniLM-L6-v2 (`embed_provider: "local"`, 384 dims), in a temporary data directory
(Qdrant local mode). Each turn is stored as `"<speaker>: <text>"`, plus
`" [shares <blip_caption>]"` when it has an image, with its `dia_id` as metadata. Then every
question of categories 1-4 is searched with its text through the same pool the proxy uses
(top 20), and the script reports, macro-averaged over questions:

- `turn@k`: fraction of the question's evidence turns among the top k results;
- `sess@k`: fraction of the evidence sessions covered by the sessions of the top-k turns;
- search latency p50/p95 (the pool call, thread hop included).

Prints a Markdown table per conversation and overall (and per category); `--json` writes the
figures. See docs/performance.md ("Long-term recall on LoCoMo").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# The dataset README's figures for plain dense all-MiniLM-L6-v2 (cosine) on this split.
REFERENCE_DENSE = {"turn@5": 0.393, "turn@10": 0.489, "turn@20": 0.581, "sess@10": 0.776}
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    session: int
    text: str


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # repaired dia ids, all present in the conversation


@dataclass(slots=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    dropped_questions: int = 0  # categories 1-4 with no usable evidence
    repaired_ids: int = 0
    dropped_ids: int = 0


@dataclass(slots=True)
class Scored:
    category: int
    turn: dict[int, float] = field(default_factory=dict)
    sess: dict[int, float] = field(default_factory=dict)
    latency_ms: float = 0.0
    returned: int = 0  # results the search gave (Mem0's score threshold can cut below top_k)


# ---- data ----------------------------------------------------------------------------


def normalize_id(raw: str) -> str | None:
    match = _EVIDENCE.fullmatch(raw.strip())
    if match is None:
        return None
    return f"D{int(match.group(1))}:{int(match.group(2))}"


def repair_evidence(entries: Sequence[str], known: set[str]) -> tuple[list[str], int, int]:
    """Split entries such as "D8:6; D9:17", repair "D:11:26" / "D30:05", drop unknown ids.
    Returns (ids in order, without duplicates; how many were repaired; how many dropped)."""
    out: list[str] = []
    repaired = dropped = 0
    for entry in entries:
        parts = [p for p in re.split(r"[;,\s]+", str(entry)) if p]
        if len(parts) != 1:
            repaired += 1
        for part in parts:
            dia_id = normalize_id(part)
            if dia_id is None or dia_id not in known:
                dropped += 1
                continue
            if dia_id != part and len(parts) == 1:
                repaired += 1
            if dia_id not in out:
                out.append(dia_id)
    return out, repaired, dropped


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares {caption}]"
    return text


def load(path: Path) -> list[Conversation]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for item in raw:
        conv = item["conversation"]
        turns: list[Turn] = []
        sessions = sorted(
            (int(m.group(1)), key)
            for key in conv
            if (m := _SESSION_KEY.fullmatch(key)) and isinstance(conv[key], list)
        )
        for number, key in sessions:
            for turn in conv[key]:
                dia_id = normalize_id(turn["dia_id"]) or turn["dia_id"]
                turns.append(Turn(dia_id, number, turn_text(turn)))
        known = {t.dia_id for t in turns}
        out = Conversation(str(item["sample_id"]), turns, [])
        for qa in item["qa"]:
            category = int(qa.get("category", 0))
            if category not in CATEGORIES:
                continue
            evidence, repaired, dropped = repair_evidence(qa.get("evidence") or [], known)
            out.repaired_ids += repaired
            out.dropped_ids += dropped
            if not evidence:
                out.dropped_questions += 1
                continue
            out.questions.append(Question(str(qa["question"]), category, tuple(evidence)))
        conversations.append(out)
    return conversations


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":", 1)[0])


# ---- metric --------------------------------------------------------------------------


def score(question: Question, ranked: Sequence[str], latency_ms: float) -> Scored:
    evidence = set(question.evidence)
    evidence_sessions = {session_of(e) for e in evidence}
    out = Scored(question.category, latency_ms=latency_ms, returned=len(ranked))
    for k in KS:
        top = ranked[:k]
        out.turn[k] = len(evidence & set(top)) / len(evidence)
        sessions = {session_of(d) for d in top}
        out.sess[k] = len(evidence_sessions & sessions) / len(evidence_sessions)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(scored: Sequence[Scored]) -> dict[str, Any]:
    n = len(scored)
    out: dict[str, Any] = {"questions": n}
    for k in KS:
        out[f"turn@{k}"] = round(sum(s.turn[k] for s in scored) / n, 4) if n else 0.0
    for k in KS:
        out[f"sess@{k}"] = round(sum(s.sess[k] for s in scored) / n, 4) if n else 0.0
    out["mean_results"] = round(sum(s.returned for s in scored) / n, 2) if n else 0.0
    latencies = [s.latency_ms for s in scored]
    out["p50_ms"] = round(percentile(latencies, 50), 2)
    out["p95_ms"] = round(percentile(latencies, 95), 2)
    return out


COLUMNS = [f"turn@{k}" for k in KS] + [f"sess@{k}" for k in KS]


def table(rows: Sequence[tuple[str, dict[str, Any]]], label: str) -> str:
    head = [label, "questions", *COLUMNS, "p50 ms", "p95 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in rows:
        cells = [name, str(s["questions"]), *(f"{s[c]:.3f}" for c in COLUMNS)]
        cells += [f"{s['p50_ms']:.1f}", f"{s['p95_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparison(overall: dict[str, Any]) -> str:
    lines = [
        "| figure | MemoryBridge | reference dense MiniLM | difference |",
        "|---|---|---|---|",
    ]
    for key, ref in REFERENCE_DENSE.items():
        ours = overall[key]
        diff = round(ours - ref, 3) + 0.0  # no "-0.000"
        lines.append(f"| {key} | {ours:.3f} | {ref:.3f} | {diff:+.3f} |")
    return "\n".join(lines)


# ---- run -----------------------------------------------------------------------------


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from memory_bridge.sources import mem0_config
    from memory_bridge.sources.mem0_pool import Mem0Pool, PoolPaths
    from memory_bridge.tenancy.config import TokenConfig

    conversations = load(args.data)
    if args.limit_conversations is not None:
        conversations = conversations[: args.limit_conversations]
    # The memory LLM is required by the config but never called: turns are stored raw.
    config = TokenConfig(
        name="bench-recall",
        llm_base_url="http://127.0.0.1:9",
        memory_llm_provider="openai",
        memory_llm_base_url="http://127.0.0.1:9",
        memory_llm_body={"model": "unused"},
        embed_provider="local",
        embed_dims=384,
    )
    mem0_dir = data_dir / "mem0"
    pool = Mem0Pool(
        PoolPaths(
            qdrant_path=data_dir / "qdrant", qdrant_url="", qdrant_api_key="", mem0_dir=mem0_dir
        ),
        threads=2,
        embed_timeout=60.0,
        llm_timeout=60.0,
    )
    results: dict[str, Any] = {}
    all_scored: list[Scored] = []
    try:
        for index, conv in enumerate(conversations, start=1):
            spec = mem0_config.build_spec(index, config, mem0_dir)
            namespace = mem0_config.namespace(index, "")
            started = time.perf_counter()
            by_session: dict[int, list[tuple[str, dict[str, str]]]] = {}
            for turn in conv.turns:
                meta = {"dia_id": turn.dia_id, "session": str(turn.session)}
                by_session.setdefault(turn.session, []).append((turn.text, meta))
            stored = 0
            for items in by_session.values():
                stored += await pool.add_raw(spec, namespace, items)
            ingest_s = time.perf_counter() - started
            questions = conv.questions
            if args.limit_questions is not None:
                questions = questions[: args.limit_questions]
            scored: list[Scored] = []
            for question in questions:
                t0 = time.perf_counter()
                found = await pool.search(spec, namespace, question.text, args.top_k)
                latency_ms = (time.perf_counter() - t0) * 1000
                ranked = [m.metadata.get("dia_id", "") for m in found]
                scored.append(score(question, ranked, latency_ms))
            all_scored.extend(scored)
            summary = summarize(scored)
            summary.update(
                turns=stored,
                ingest_s=round(ingest_s, 1),
                ingest_ms_per_turn=round(ingest_s * 1000 / max(stored, 1), 2),
                dropped_questions=conv.dropped_questions,
                repaired_evidence_ids=conv.repaired_ids,
                dropped_evidence_ids=conv.dropped_ids,
            )
            results[conv.sample_id] = summary
            print(
                f"{conv.sample_id}: {stored} turns in {ingest_s:.1f} s, "
                f"{len(scored)} questions, turn@10 {summary['turn@10']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await pool.close_all(timeout=30.0)
    by_category = {
        CATEGORIES[c]: summarize([s for s in all_scored if s.category == c])
        for c in CATEGORIES
        if any(s.category == c for s in all_scored)
    }
    return {
        "data": str(args.data),
        "embedder": "local all-MiniLM-L6-v2 (384 dims), Mem0 search through Mem0Pool",
        "top_k": args.top_k,
        "conversations": results,
        "overall": summarize(all_scored),
        "by_category": by_category,
        "reference_dense_minilm": REFERENCE_DENSE,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo_dev.json")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None, help="per conversation")
    parser.add_argument("--top-k", type=int, default=max(KS))
    parser.add_argument("--verbose", action="store_true", help="show Mem0's log")
    args = parser.parse_args(argv)
    if args.top_k < max(KS):
        parser.error(f"--top-k must be at least {max(KS)}")
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
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        os.environ.setdefault("MEM0_DIR", str(Path(tmp) / "mem0"))
        report = asyncio.run(run(args, Path(tmp)))
    rows = [*report["conversations"].items(), ("**overall**", report["overall"])]
    text = "\n\n".join(
        [
            table(rows, "conversation"),
            table(list(report["by_category"].items()), "category"),
            comparison(report["overall"]),
        ]
    )
    report["table"] = text
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
