"""The long-term layer's recall on LoCoMo (`scripts/bench_recall.py --with-mem0`): Mem0's dense
search, as the proxy ran it before the episodic layer.

Every turn is stored as one raw memory (`Mem0Pool.add_raw`: Mem0's `infer=False`, so no LLM)
of one token whose embedder is the local all-MiniLM-L6-v2, in `data_dir` (the embedded vector
engine), with its `dia_id` as metadata; each question is searched through the same pool the
proxy uses. Latency: one `Mem0Pool.search` call (thread hop, query embedding, engine search).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.locomo import Conversation, Scored, by_category, score, summarize


async def _score_conversation(
    pool: Any, spec: Any, namespace: str, conv: Conversation, limit: int | None, top_k: int
) -> tuple[list[Scored], int, float]:
    """Every session of `conv` stored raw, then its questions searched: the scored questions,
    the turns stored and the seconds storing took."""
    started = time.perf_counter()
    stored = 0
    for turns in conv.sessions().values():
        items = [(t.text, {"dia_id": t.dia_id, "session": str(t.session)}) for t in turns]
        stored += await pool.add_raw(spec, namespace, items)
    ingest_s = time.perf_counter() - started
    scored: list[Scored] = []
    for question in conv.questions[:limit]:
        t0 = time.perf_counter()
        found = await pool.search(spec, namespace, question.text, top_k)
        latency_ms = (time.perf_counter() - t0) * 1000
        ranked = [m.metadata.get("dia_id", "") for m in found]
        scored.append(score(question, ranked, latency_ms))
    return scored, stored, ingest_s


async def run(
    conversations: Sequence[Conversation],
    data_dir: Path,
    limit_questions: int | None,
    top_k: int,
) -> dict[str, Any]:
    from memory_bridge.sources.longterm import config as mem0_config
    from memory_bridge.sources.longterm.pool import Mem0Pool
    from memory_bridge.tenancy.config import TokenConfig
    from memory_bridge.vectors.edge import EdgeEngine

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
    engine = EdgeEngine(data_dir)
    pool = Mem0Pool(engine, mem0_dir, threads=2, embed_timeout=60.0, llm_timeout=60.0)
    results: dict[str, Any] = {}
    all_scored: list[Scored] = []
    try:
        for index, conv in enumerate(conversations, start=1):
            spec = mem0_config.build_spec(index, config, mem0_dir)
            namespace = mem0_config.namespace(index, "")
            scored, stored, ingest_s = await _score_conversation(
                pool, spec, namespace, conv, limit_questions, top_k
            )
            all_scored.extend(scored)
            summary = summarize(scored)
            summary.update(turns=stored, ingest_s=round(ingest_s, 1))
            results[conv.sample_id] = summary
            print(
                f"mem0 {conv.sample_id}: {stored} turns in {ingest_s:.1f} s, "
                f"turn@10 {summary['turn@10']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await pool.close_all(timeout=30.0)
        engine.close()
    return {
        "pipeline": "Mem0 dense search through Mem0Pool (raw memories, the embedded engine)",
        "conversations": results,
        "overall": summarize(all_scored),
        "by_category": by_category(all_scored),
    }
