"""The product's episodic recall on LoCoMo, driven through its own code (`scripts/bench_recall.py`).

Indexing: one token, one end user per conversation (its `sample_id`), each LoCoMo session a
session. In a session the speaker of its first turn plays the end user and the other speaker
the assistant; each exchange (a user turn and the reply to it) is handed, in order, to
`EpisodicMemory.remember` as the queue's job would hand it: the user turn as the exchange's new
message, the reply as the upstream's reply, a unique event id. `remember` embeds both with the
token's embedder (the local all-MiniLM-L6-v2), and the engine (embedded Qdrant Edge, in a
temporary directory) stores them with BM25 of the text in its context.

Recall: each question goes through `EpisodicMemory.recall` (query embedding, hybrid search of
the end user's messages, weighted RRF in the engine) and the Context Forge's `rank` (weighted
RRF + recency, with the weights of the question's intent) and `select` (relevance floor,
duplicates, token budget); only the items the forge keeps, i.e. what the proxy would inject,
in its order, are the ranking scored. A
candidate's dia id is found from its lineage (event id) and its text. Latency: `recall` +
`rank` + `select`, one query at a time.

Off-topic (`off_topic`): each conversation's memory is also asked the other conversations'
questions; a question unrelated to what is stored should get nothing injected. Reported: the
share of such questions that got nothing, and the injected tokens per request.

Variants change only what the product lets a caller set (`EpisodicMemory`'s keyword
arguments, the forge's ranking configuration `Ranking`, whose every field a variant may set as
`+name=value`, and its named presets as `+preset=name`); the `product` variant sets nothing, so
it is what the proxy runs. Embeddings of stored texts are memoised across the variants'
indexes (the embedder is deterministic); every query is embedded for real.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.locomo import Conversation, Scored, Turn, by_category, score, summarize
from bench.recall_embedders import packaged
from bench.recall_prf import PrfMemory
from bench.recall_variants import Variant
from bench.recall_windows import WindowedMemory
from memory_bridge.context.forge.intent import classify, ranking_for
from memory_bridge.context.forge.pipeline import weighed
from memory_bridge.context.forge.rank import rank
from memory_bridge.context.forge.select import select
from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.core.entities import Entity, extract
from memory_bridge.core.messages import Message
from memory_bridge.core.token_count import count_tokens
from memory_bridge.core.turn import Reply, Scope
from memory_bridge.core.turn import Turn as ChatTurn
from memory_bridge.embedding.embedders import Embedders, EmbedderSpec, embedder_spec
from memory_bridge.sources.base import Exchange
from memory_bridge.sources.episodic import MAX_TEXT_CHARS, EpisodicMemory
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.tenancy.ranking import Ranking
from memory_bridge.vectors.edge import EdgeEngine

TIMEOUT = 120.0  # generous: the benchmark measures latency, it does not enforce it
THREADS = 2
DAY = 86400.0


def token_config(embedder: str = "minilm") -> TokenConfig:
    """A token whose embedder is the packaged local MiniLM (its memory LLM is never called);
    for another candidate (`bench.recall_embedders`) a token without an embedder of its own,
    which gets the bench's candidate as the install's default."""
    if embedder != "minilm":
        return TokenConfig(name="bench-recall", llm_base_url="http://127.0.0.1:9")
    return TokenConfig(
        name="bench-recall",
        llm_base_url="http://127.0.0.1:9",
        memory_llm_provider="openai",
        memory_llm_base_url="http://127.0.0.1:9",
        memory_llm_body={"model": "unused"},
        embed_provider="local",
        embed_dims=384,
    )


class CachingEmbedders(Embedders):
    """An embedder, memoised per text: for indexing the same texts more than once."""

    def __init__(
        self, inner: Embedders, client: httpx.AsyncClient, executor: BlockingExecutor
    ) -> None:
        super().__init__(client, executor)
        self._inner = inner
        self._cache: dict[tuple[str, str], list[float]] = {}
        self.computed = 0

    async def embed(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if (spec.model_id, t) not in self._cache]
        if missing:
            vectors = await self._inner.embed(spec, missing)
            self.computed += len(missing)
            self._cache.update(zip(((spec.model_id, t) for t in missing), vectors, strict=True))
        return [self._cache[(spec.model_id, t)] for t in texts]

    def local_query(self, spec: EmbedderSpec) -> Callable[[str], list[float]] | None:
        return self._inner.local_query(spec)


def _settings(variant: Variant, *, query: bool) -> dict[str, Any]:
    """The keyword arguments of `EpisodicMemory` this variant sets."""
    kwargs: dict[str, Any] = {}
    if query and variant.depth is not None:
        kwargs["depth"] = variant.depth
    if query:  # the bench's ranking is not the token's: say whether the walk's rank counts
        kwargs["walk"] = variant.rank_config().graph_weight > 0
    if query and variant.apply != "forge":
        if variant.dense is not None:
            kwargs["dense_weight"] = variant.dense
        if variant.sparse is not None:
            kwargs["sparse_weight"] = variant.sparse
    elif variant.context is not None:
        kwargs["index_context"] = variant.context
    return kwargs


def exchanges(turns: Sequence[Turn]) -> list[tuple[list[Turn], Turn | None]]:
    """(the end user's new turns, the reply) in order; the first speaker plays the end user."""
    if not turns:
        return []
    user = turns[0].speaker
    out: list[tuple[list[Turn], Turn | None]] = []
    pending: list[Turn] = []
    for turn in turns:
        if turn.speaker == user:
            pending.append(turn)
        else:
            out.append((pending, turn))
            pending = []
    if pending:
        out.append((pending, None))
    return out


def _windows(
    memory: WindowedMemory, prefix: str, session: Sequence[tuple[list[Turn], Turn | None]]
) -> None:
    """The texts in context of a session's messages, by event id, for a window variant."""
    texts = [
        [t.text.strip()[:MAX_TEXT_CHARS] for t in [*asked, *([reply] if reply else [])]]
        for asked, reply in session
    ]
    for i, in_context in enumerate(memory.window.contexts(texts)):
        memory.in_context[f"{prefix}:e{i}"] = in_context


@dataclass(slots=True)
class IndexedConversation:
    conversation: Conversation
    dia_ids: dict[tuple[str, str], str]  # (event id, stored text) -> dia id
    now: float | None  # the clock of ranking for dated variants (a day after the last session)


class EpisodicBench:
    def __init__(
        self,
        data_dir: Path,
        embedder: str = "minilm",
        embedder_path: str | None = None,
        entities: Callable[[str], Sequence[Entity]] = extract,
    ) -> None:
        self.entities = entities
        self.engine = EdgeEngine(data_dir / "edge")
        self.executor = BlockingExecutor(THREADS, "vectors")
        self.client = httpx.AsyncClient()
        self.config = token_config(embedder)
        if embedder == "minilm":
            self.embedders = Embedders(self.client, self.executor)
            spec = embedder_spec(self.config)
            assert spec is not None
        else:
            candidate = packaged(embedder, embedder_path, self.client, self.executor)
            self.embedders, spec = candidate, candidate.spec
        self.caching = CachingEmbedders(self.embedders, self.client, self.executor)
        self.spec = spec
        self.embedder = embedder
        self._tokens: dict[tuple[bool | None, bool, Any], int] = {}

    def token(self, key: tuple[bool | None, bool, Any]) -> int:
        return self._tokens.setdefault(key, len(self._tokens) + 1)

    def memory(
        self, variant: Variant, *, query: bool, clock: list[float] | None = None
    ) -> EpisodicMemory:
        kwargs = _settings(variant, query=query)
        if clock is not None:
            kwargs["clock"] = lambda: clock[0]
        if not query and variant.window is not None:
            return WindowedMemory(
                self.engine,
                self.caching,
                self.executor,
                TIMEOUT,
                TIMEOUT,
                default_embedder=self.spec,
                entities=self.entities,
                window=variant.window,
                **kwargs,
            )
        if query and variant.prf:
            return PrfMemory(
                self.engine,
                self.embedders,
                self.executor,
                TIMEOUT,
                TIMEOUT,
                default_embedder=self.spec,
                entities=self.entities,
                terms=variant.prf,
                weight=variant.prf_weight,
                **kwargs,
            )
        return EpisodicMemory(
            self.engine,
            self.embedders if query else self.caching,
            self.executor,
            TIMEOUT,
            TIMEOUT,
            default_embedder=self.spec,  # what a token without its own embedder gets
            entities=self.entities,
            **kwargs,
        )

    async def index(self, conv: Conversation, variant: Variant) -> IndexedConversation:
        """Every turn of `conv` through `remember`, into the shard of `variant`'s index key."""
        clock = [0.0] if variant.dated else None
        memory = self.memory(variant, query=False, clock=clock)
        token = self.token(variant.index_key)
        dia_ids: dict[tuple[str, str], str] = {}
        for number, turns in conv.sessions().items():
            scope = Scope(token_id=token, user=conv.sample_id, session=f"session_{number}")
            if isinstance(memory, WindowedMemory):
                _windows(memory, f"{conv.sample_id}:s{number}", exchanges(turns))
            for i, (asked, reply) in enumerate(exchanges(turns)):
                event_id = f"{conv.sample_id}:s{number}:e{i}"
                new = tuple(Message(role="user", content=t.text) for t in asked)
                for t in [*asked, *([reply] if reply else [])]:
                    dia_ids[(event_id, t.text.strip()[:MAX_TEXT_CHARS])] = t.dia_id
                turn = ChatTurn(event_id, scope, self.config, new, asked[-1].text if asked else "")
                exchange = Exchange(
                    turn=turn,
                    new_messages=new,
                    reply=Reply(content=reply.text if reply else None),
                    event_id=event_id,
                )
                if clock is not None:
                    clock[0] = conv.session_dates[number] + i  # keeps the turns' order
                await memory.remember(exchange)
        now = max(conv.session_dates.values()) + DAY if variant.dated else None
        return IndexedConversation(conv, dia_ids, now)

    async def ask(
        self,
        memory: EpisodicMemory,
        indexed: IndexedConversation,
        variant: Variant,
        text: str,
        ranking: Ranking,
    ) -> tuple[list[str], int, float]:
        """The dia ids the forge injects, in its order, their tokens, and the milliseconds of
        recall + rank + select."""
        conv = indexed.conversation
        scope = Scope(token_id=self.token(variant.index_key), user=conv.sample_id, session="ask")
        turn = ChatTurn("q", scope, self.config, (Message(role="user", content=text),), text)
        started = time.perf_counter()
        recall = await memory.recall(turn)
        now = indexed.now if indexed.now is not None else time.time()
        # As the proxy does: the intent of the question picks its preset.
        ranking = ranking_for(ranking, None, classify(text))
        candidates = [c for c in recall.candidates if weighed(c, ranking)]
        ranked = rank(candidates, ranking, now)
        kept = [o for o in select(ranked, ranking, count_tokens, [text]) if o.kept]
        latency_ms = (time.perf_counter() - started) * 1000
        ids = [
            indexed.dia_ids[(o.scored.candidate.lineage["event_id"], o.scored.candidate.text)]
            for o in kept
        ]
        return ids, sum(o.tokens for o in kept), latency_ms

    async def close(self) -> None:
        await self.executor.shutdown(30.0)
        self.engine.close()
        await self.client.aclose()


async def run(
    conversations: Sequence[Conversation],
    data_dir: Path,
    variants: Sequence[Variant],
    limit_questions: int | None,
    embedder: str = "minilm",
    embedder_path: str | None = None,
    asked_off_topic: str = "product",
    entities: Callable[[str], Sequence[Entity]] = extract,
) -> tuple[dict[str, Any], EpisodicBench]:
    """The figures of every variant; the bench is returned open (the speed stage reuses its
    embeddings) and must be closed by the caller."""
    bench = EpisodicBench(data_dir, embedder, embedder_path, entities)
    indexed: dict[tuple[bool | None, bool, Any], list[IndexedConversation]] = {}
    ingest: dict[str, Any] = {}
    for variant in variants:
        if variant.index_key in indexed:
            continue
        started = time.perf_counter()
        computed = bench.caching.computed
        indexed[variant.index_key] = [await bench.index(c, variant) for c in conversations]
        elapsed = time.perf_counter() - started
        turns = sum(len(c.turns) for c in conversations)
        ingest[variant.name] = {
            "turns": turns,
            "seconds": round(elapsed, 1),
            "embedded": bench.caching.computed - computed,
        }
        print(
            f"indexed {turns} turns for {variant.name} in {elapsed:.1f} s "
            f"({bench.caching.computed - computed} embedded)",
            file=sys.stderr,
            flush=True,
        )
    results: list[dict[str, Any]] = []
    for variant in variants:
        memory = bench.memory(variant, query=True)
        ranking = variant.rank_config()
        results.append(
            await _score_variant(
                bench, memory, indexed[variant.index_key], variant, ranking, limit_questions
            )
        )
        if (asked_off_topic == "all" and variant.preset != "no_floor") or (
            asked_off_topic == "product" and variant is variants[0]
        ):
            results[-1]["off_topic"] = await off_topic(
                bench, memory, indexed[variant.index_key], variant, ranking, limit_questions
            )
    report = {
        "pipeline": (
            "EpisodicMemory.remember per exchange; EpisodicMemory.recall + forge rank/select "
            f"(embedded Qdrant Edge, {bench.spec.model_id}, {bench.spec.dims} dims)"
        ),
        "ingest": ingest,
        "variants": results,
    }
    return report, bench


async def _score_variant(
    bench: EpisodicBench,
    memory: EpisodicMemory,
    indexed: Sequence[IndexedConversation],
    variant: Variant,
    ranking: Ranking,
    limit_questions: int | None,
) -> dict[str, Any]:
    """Every conversation's own questions: the figures of one variant."""
    per_conversation: dict[str, Any] = {}
    all_scored: list[Scored] = []
    tokens: list[int] = []
    for item in indexed:
        scored = []
        for question in item.conversation.questions[:limit_questions]:
            ids, spent, ms = await bench.ask(memory, item, variant, question.text, ranking)
            scored.append(score(question, ids, ms))
            tokens.append(spent)
        all_scored.extend(scored)
        summary = summarize(scored)
        summary["turns"] = len(item.conversation.turns)
        per_conversation[item.conversation.sample_id] = summary
    overall = summarize(all_scored)
    overall["injected_tokens"] = round(sum(tokens) / max(1, len(tokens)), 1)
    overall["nothing_injected"] = round(tokens.count(0) / max(1, len(tokens)), 4)
    print(
        f"{variant.name}: turn@10 {overall['turn@10']:.3f}, p50 {overall['p50_ms']:.1f} ms",
        file=sys.stderr,
        flush=True,
    )
    return {
        "name": variant.name,
        "describe": variant.describe(),
        "dense_weight": variant.dense,
        "sparse_weight": variant.sparse,
        "index_context": variant.context,
        "dated": variant.dated,
        "weights_apply": variant.apply,
        "conversations": per_conversation,
        "overall": overall,
        "by_category": by_category(all_scored),
    }


async def off_topic(
    bench: EpisodicBench,
    memory: EpisodicMemory,
    indexed: Sequence[IndexedConversation],
    variant: Variant,
    ranking: Ranking,
    limit_questions: int | None,
) -> dict[str, Any]:
    """Each conversation's memory asked the other conversations' questions."""
    tokens: list[int] = []
    for item in indexed:
        for other in indexed:
            if other is item:
                continue
            for question in other.conversation.questions[:limit_questions]:
                _, spent, _ = await bench.ask(memory, item, variant, question.text, ranking)
                tokens.append(spent)
    out = {
        "questions": len(tokens),
        "nothing_injected": round(tokens.count(0) / max(1, len(tokens)), 4),
        "injected_tokens": round(sum(tokens) / max(1, len(tokens)), 1),
    }
    print(
        f"{variant.name} off-topic: nothing injected for {out['nothing_injected']:.1%}, "
        f"{out['injected_tokens']} tokens per request",
        file=sys.stderr,
        flush=True,
    )
    return out
