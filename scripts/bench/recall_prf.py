"""Pseudo-relevance feedback for the recall bench (`+prf=N`, `+prfWeight=W`): measured before
the product would do it.

RM3-like: after the product's hybrid search, the words of its top `FEEDBACK` hits that the
question lacks are weighed by how often they occur there times their rarity among all the
candidates (a local IDF: the speakers' names, in every hit, weigh nothing), the best `N` are
appended to the question, and a second BM25 search runs with that text. Its list is fused into
the sparse ranks (weighted RRF, the second list at `W`), the dense ranks stay, and the
`depth` best of the union (by the forge's default weights) go to the forge. One more search
per question: its cost is in the variant's latency.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import replace

from memory_bridge.core.candidates import Candidate
from memory_bridge.core.turn import Turn
from memory_bridge.sources.base import Recall
from memory_bridge.sources.episodic import PREFETCH, EpisodicMemory
from memory_bridge.sources.episodic_points import KIND, lineage
from memory_bridge.vectors.common import Bm25Encoder, Bm25Settings
from memory_bridge.vectors.index import HybridHit, Where

FEEDBACK = 3
RRF_K = 60
_WORD = re.compile(r"[^\W\d_]{3,}")


class PrfMemory(EpisodicMemory):
    def __init__(self, *args: object, terms: int, weight: float, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.terms = terms
        self.weight = weight
        self.encoder = Bm25Encoder(Bm25Settings())

    def expansion(self, query: str, candidates: list[Candidate]) -> list[str]:
        asked = self.encoder.terms(query)
        docs = [self._words(c.text) for c in candidates]
        df: Counter[int] = Counter(t for doc in docs for t in set(doc.values()))
        weight: dict[int, float] = defaultdict(float)
        spelled: dict[int, str] = {}
        for doc in docs[:FEEDBACK]:
            for word, term in doc.items():
                if term in asked:
                    continue
                weight[term] += math.log(1 + len(docs) / df[term])
                spelled.setdefault(term, word)
        best = sorted(weight, key=lambda t: weight[t], reverse=True)[: self.terms]
        return [spelled[t] for t in best]

    def _words(self, text: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for word in _WORD.findall(text.lower()):
            terms = self.encoder.terms(word)
            if len(terms) == 1:
                out[word] = next(iter(terms))
        return out

    async def recall(self, turn: Turn) -> Recall:
        first = await super().recall(turn)
        candidates = list(first.candidates)
        words = self.expansion(turn.query, candidates) if candidates else []
        if not words:
            return first
        spec = self.embedder(turn.config)
        shard = (await self.plan(turn.scope.token_id, spec, fresh=False)).read
        user = turn.scope.user
        text = f"{turn.query} {' '.join(words)}"

        def search() -> list[HybridHit]:
            index = self._engine.existing(turn.scope.token_id, shard.model_id, shard.dims)
            if index is None:
                return []
            return index.hybrid_search(
                user=user,
                query_dense=None,
                query_text=text,
                where=Where(user=user, kind=KIND),
                limit=PREFETCH,
                prefetch_limit=PREFETCH,
            )

        second = await self._executor.run(search)
        return replace(first, candidates=self._fused(turn.query, candidates, second))

    def _fused(
        self, query: str, candidates: list[Candidate], second: list[HybridHit]
    ) -> tuple[Candidate, ...]:
        by_id = {c.id: c for c in candidates}
        asked = self.encoder.terms(query)
        for hit in second:
            if hit.id not in by_id and hit.payload.text:
                found = self.encoder.terms(hit.payload.text)
                by_id[hit.id] = Candidate(
                    source=self.name,
                    id=hit.id,
                    text=hit.payload.text,
                    sparse_coverage=round(len(asked & found) / len(asked), 4) if asked else None,
                    query_terms=len(asked),
                    created_at=hit.payload.created_at or None,
                    lineage=lineage(hit.payload, None),
                )
        sparse: dict[str, float] = defaultdict(float)
        for c in candidates:
            if c.sparse_rank is not None:
                sparse[c.id] += 1 / (RRF_K + c.sparse_rank)
        for hit in second:
            if hit.sparse_rank is not None:
                sparse[hit.id] += self.weight / (RRF_K + hit.sparse_rank)
        order = sorted(sparse, key=lambda cid: sparse[cid], reverse=True)
        ranks = {cid: i for i, cid in enumerate(order, 1)}
        merged = [replace(c, sparse_rank=ranks.get(c.id)) for c in by_id.values()]

        def fused(c: Candidate) -> float:
            score = 0.5 / (RRF_K + c.dense_rank) if c.dense_rank else 0.0
            return score + (1 / (RRF_K + c.sparse_rank) if c.sparse_rank else 0.0)

        return tuple(sorted(merged, key=fused, reverse=True)[: self._depth])
