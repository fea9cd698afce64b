"""Episodic memory: the raw conversation, indexed for hybrid recall across sessions.

Every stored user and assistant message (text only: never tool payloads, reasoning, injected
memory or system prompts) is embedded with the token's embedder and BM25-indexed by the vector
engine, per token and end user, by a job of the durable queue. Recall searches the end user's
messages of every session with the latest user text, dense and sparse lists fused, and hands
the ranked candidates (scores, ranks, lineage) to the Context Forge. No LLM is involved: a
fact said months ago in another session is found by its words and its meaning.

The sparse side indexes each message together with its neighbours in the session (its
conversational context, `episodic_context`), so an answer is also found by the words of its
question, and a question by its answer's.

Every token has it: one without an embedder of its own gets the install's default
(`sources.embedder.default_spec`: the local MiniLM, or BM25 alone in a sparse-only shard).
Which shard is read and written is the token's current generation (`sources.vector_generations`):
a rebuild or re-embed fills the next one while recall keeps reading this one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from functools import partial

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.core.candidates import Candidate
from memory_bridge.core.entities import Entity, extract
from memory_bridge.core.turn import Turn
from memory_bridge.embedding.embedders import SPARSE_ONLY, Embedders, EmbedderSpec, episodic_spec
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.sources.episodic_context import (
    AFTER,
    BEFORE,
    OWN,
    Session,
    in_context,
    session_contexts,
)
from memory_bridge.sources.episodic_points import (
    KIND,
    SummaryPoint,
    importance,
    lineage,
    summary_point_id,
    turn_point,
    turn_point_id,
)
from memory_bridge.sources.relational import GraphHit, traverse
from memory_bridge.sources.vector_generations import Generations, ShardPlan, ShardTarget
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.vectors.index import (
    HybridHit,
    PointPayload,
    VectorEngine,
    VectorIndex,
    VectorPoint,
    Where,
)

# Candidates handed to the forge: more than it will keep, so ranking and dedup have a choice.
DEPTH = 20
PREFETCH = 50
MAX_QUERY_CHARS = 4000
MAX_TEXT_CHARS = 8000


class EpisodicMemory:
    name = "episodic"
    on_recall_failure = OnRecallFailure.MEMORY_UNAVAILABLE

    def __init__(
        self,
        engine: VectorEngine,
        embedders: Embedders,
        executor: BlockingExecutor,
        search_timeout: float,
        store_timeout: float,
        enabled: bool = True,
        *,
        dense_weight: float = 1.0,
        sparse_weight: float = 1.0,
        index_context: bool = True,
        clock: Callable[[], float] = time.time,
        entities: Callable[[str], Sequence[Entity]] = extract,
        depth: int = DEPTH,
        walk: bool | None = None,
        default_embedder: EmbedderSpec = SPARSE_ONLY,
        generations: Generations | None = None,
    ) -> None:
        # The keyword arguments are the fusion weights of the engine's hybrid search, whether
        # the sparse side indexes a message with its context, the clock of `created_at` and
        # the entity extraction of the relational fetch, how many candidates recall hands the
        # forge, and whether the relational walk runs (None: when the token weighs it, see
        # `walks`): defaults for the proxy, set otherwise by the benchmarks
        # (scripts/bench_recall.py).
        self._enabled = enabled
        self._dense_weight = dense_weight
        self._sparse_weight = sparse_weight
        self._index_context = index_context
        self._clock = clock
        self._entities = entities
        self._depth = depth
        self._walk = walk
        self._engine = engine
        self._embedders = embedders
        self._executor = executor
        self._search_timeout = search_timeout
        self._store_timeout = store_timeout
        self._default = default_embedder
        self._generations = generations

    @property
    def default_embedder(self) -> EmbedderSpec:
        return self._default

    def walks(self, config: TokenConfig) -> bool:
        """Whether recall runs the relational walk for this token: only where its rank can
        count, i.e. the token's `memory.forge` weighs it (`graphWeight` > 0; the server's
        ranking and the intents' presets leave it at 0). The walk is a few filtered scrolls of
        the user's points on the request's path, worth nothing while its rank weighs 0."""
        if self._walk is not None:
            return self._walk
        forge = config.memory_config.forge
        return (
            forge is not None and "graph_weight" in forge.given and forge.ranking.graph_weight > 0
        )

    def consumes(self, config: TokenConfig) -> bool:
        return self._spec(config) is not None

    def _spec(self, config: TokenConfig) -> EmbedderSpec | None:
        return episodic_spec(config, self._default) if self._enabled else None

    def embedder(self, config: TokenConfig) -> EmbedderSpec:
        """The embedder the token's episodic index is made with (its own or the default)."""
        return episodic_spec(config, self._default)

    async def plan(self, token_id: int, spec: EmbedderSpec, *, fresh: bool) -> ShardPlan:
        if self._generations is None:
            own = ShardTarget(spec, spec.model_id, spec.dims)
            return ShardPlan(read=own, writes=(own,))
        return await self._generations.plan(token_id, spec, fresh=fresh)

    async def recall(self, turn: Turn) -> Recall:
        spec = self._spec(turn.config)
        if spec is None or not turn.query:
            return Recall(source=self.name)
        query = turn.query[:MAX_QUERY_CHARS]
        user = turn.scope.user
        async with asyncio.timeout(self._search_timeout):
            shard = (await self.plan(turn.scope.token_id, spec, fresh=False)).read
            # A local embedder runs in the search's thread hop: the loop's round trip between
            # the two cost the request time while Mem0's search held the GIL.
            embed_here = self._embedders.local_query(shard.spec)
            vector: list[float] = []
            if embed_here is None:
                (vector,) = await self._embedders.embed(shard.spec, [query])
            token_id = turn.scope.token_id
            seeds = [e.key for e in self._entities(query)] if self.walks(turn.config) else []

            def search() -> tuple[list[HybridHit], list[GraphHit]]:
                # One thread hop for all the calls: each hop costs the request time.
                dense = vector if embed_here is None else embed_here(query)
                index = self._engine.existing(token_id, shard.model_id, shard.dims)
                if index is None:  # nothing was ever indexed for the token: nothing to recall
                    return [], []
                graph = traverse(index, user, KIND, seeds) if seeds else []
                return index.hybrid_search(
                    user=user,
                    query_dense=dense or None,
                    query_text=query,
                    where=Where(user=user, kind=KIND),
                    limit=self._depth,
                    prefetch_limit=PREFETCH,
                    dense_weight=self._dense_weight,
                    sparse_weight=self._sparse_weight,
                ), graph

            hits, graph = await self._executor.run(search)
        return Recall(source=self.name, candidates=self._candidates(hits, graph))

    def _candidates(
        self, hits: Sequence[HybridHit], graph: Sequence[GraphHit]
    ) -> tuple[Candidate, ...]:
        """The hybrid hits, then the memories only the relational fetch reached; a hit the
        fetch reached too carries its graph rank and the path ("via entity X (depth n)")."""
        walked = {g.point.id: g for g in graph}
        out = []
        for hit in hits:
            if not hit.payload.text:
                continue
            g = walked.pop(hit.id, None)
            out.append(
                Candidate(
                    source=self.name,
                    id=hit.id,
                    text=hit.payload.text,
                    dense_rank=hit.dense_rank,
                    sparse_rank=hit.sparse_rank,
                    graph_rank=g.rank if g else None,
                    dense_score=hit.dense_score,
                    sparse_score=hit.sparse_score,
                    sparse_coverage=hit.sparse_coverage,
                    query_terms=hit.query_terms,
                    created_at=hit.payload.created_at or None,
                    importance=importance(hit.payload),
                    lineage=lineage(hit.payload, g),
                )
            )
        for g in walked.values():
            if g.point.payload.text:
                out.append(
                    Candidate(
                        source=self.name,
                        id=g.point.id,
                        text=g.point.payload.text,
                        graph_rank=g.rank,
                        created_at=g.point.payload.created_at or None,
                        importance=importance(g.point.payload),
                        lineage=lineage(g.point.payload, g),
                    )
                )
        return tuple(out)

    async def remember(self, exchange: Exchange) -> None:
        spec = self._spec(exchange.turn.config)
        if spec is None:
            return
        plan = await self.plan(exchange.turn.scope.token_id, spec, fresh=True)
        # The turn's recorded time, as a rebuild stamps it: order survives a rebuild or import.
        created = exchange.recorded_at if exchange.recorded_at is not None else self._clock()
        async with asyncio.timeout(self._store_timeout):
            await self.index_exchange(exchange, plan.writes, created)

    def texts(self, exchange: Exchange) -> list[str]:
        """The text of every message of the turn that is indexed, in order (the position of
        each is its point's: `turn_point_id`)."""
        messages = [*exchange.new_messages]
        if exchange.reply.has_text:
            messages.append(exchange.reply.as_message())
        texts = [
            msg.text().strip()[:MAX_TEXT_CHARS]
            for msg in messages
            if msg.role in ("user", "assistant")
        ]
        return [text for text in texts if text]

    def contexts(
        self,
        index: VectorIndex | None,
        exchanges: Sequence[Exchange],
        texts: Sequence[list[str]],
        created: Sequence[float],
    ) -> tuple[list[list[str]], list[VectorPoint]]:
        """The BM25 text of every indexed message of these turns, by turn, and the earlier
        points whose context they extend (upserted again); see `episodic_context`. Blocking:
        reads the shard."""
        out = [list(t) for t in texts]
        if not self._index_context:
            return out, []
        sessions: dict[tuple[str, str], Session] = {}
        for n, (exchange, at) in enumerate(zip(exchanges, created, strict=True)):
            if exchange.explicit:  # a stated fact, not a conversation: its own words alone
                out[n] = [in_context(texts[n], k, 0, 0, OWN) for k in range(len(texts[n]))]
                continue
            scope = exchange.turn.scope
            key = (scope.user, scope.session)
            session = sessions.setdefault(key, Session(scope.user, scope.session, at, []))
            session.turns.append((n, texts[n]))
        again: list[VectorPoint] = []
        for session in sessions.values():
            found, points = session_contexts(index, session, BEFORE, AFTER, OWN)
            for n, in_turn in found.items():
                out[n] = in_turn
            again.extend(points)
        return out, again

    async def remember_batch(self, exchanges: Sequence[Exchange]) -> None:
        """`remember` for several turns of one token at once (a batch of the job queue's
        backlog): one embedding call and one upsert per shard for all of them."""
        if not exchanges:
            return
        first = exchanges[0].turn
        spec = self._spec(first.config)
        if spec is None:
            return
        plan = await self.plan(first.scope.token_id, spec, fresh=True)
        created = [self._clock() if e.recorded_at is None else e.recorded_at for e in exchanges]
        async with asyncio.timeout(self._store_timeout):
            await self.index_exchanges(exchanges, plan.writes, created)

    async def index_exchange(
        self, exchange: Exchange, targets: Sequence[ShardTarget], created_at: float
    ) -> int:
        """Embed and upsert a turn's messages into each target shard; returns how many points
        per shard. Point ids derive from the event: a retry or a rebuild overwrites, never
        duplicates."""
        return await self.index_exchanges([exchange], targets, [created_at])

    async def index_exchanges(
        self,
        exchanges: Sequence[Exchange],
        targets: Sequence[ShardTarget],
        created: Sequence[float],
    ) -> int:
        """`index_exchange` for turns of one token: one embedding call (chunked by the
        embedder) and one upsert per target for all their messages; how many points."""
        texts = [self.texts(exchange) for exchange in exchanges]
        rows = [
            (exchange, i, text, at)
            for exchange, at, turn in zip(exchanges, created, texts, strict=True)
            for i, text in enumerate(turn)
        ]
        if not rows:
            return 0
        token_id = exchanges[0].turn.scope.token_id
        for target in targets:
            vectors = await self._embedders.embed(target.spec, [row[2] for row in rows])
            index = await self._index(token_id, target)
            contexts, again = await self._executor.run(
                partial(self.contexts, index, exchanges, texts, created)
            )
            in_context = [text for turn in contexts for text in turn]
            points = [
                turn_point(exchange, i, text, sparse, at, vector, self._entities)
                for (exchange, i, text, at), sparse, vector in zip(
                    rows, in_context, vectors, strict=True
                )
            ]
            await self._executor.run(partial(index.upsert, [*again, *points]))
        return len(rows)

    async def forget(self, token_id: int, config: TokenConfig, event_id: str, count: int) -> None:
        """Delete the points one event's first `count` messages were indexed as, in every
        shard the token's episodic memory is written to (ids derive from the event)."""
        spec = self._spec(config)
        if spec is None or count <= 0:
            return
        ids = [turn_point_id(event_id, i) for i in range(count)]
        plan = await self.plan(token_id, spec, fresh=True)
        for target in {(t.model_id, t.dims): t for t in (plan.read, *plan.writes)}.values():
            found = await self._executor.run(
                partial(self._engine.existing, token_id, target.model_id, target.dims)
            )
            if found is not None:
                await self._executor.run(partial(found.delete, ids))

    async def index_summary(self, config: TokenConfig, summary: SummaryPoint) -> None:
        """A session summary indexed beside the turns it covers, recalled like them."""
        spec = self._spec(config)
        if spec is None:
            return
        plan = await self.plan(summary.token_id, spec, fresh=True)
        async with asyncio.timeout(self._store_timeout):
            await self.index_summary_into(summary, plan.writes)

    async def index_summary_into(
        self, summary: SummaryPoint, targets: Sequence[ShardTarget]
    ) -> None:
        for target in targets:
            (vector,) = await self._embedders.embed(target.spec, [summary.text])
            point = VectorPoint(
                id=summary_point_id(summary.summary_id),
                dense=vector or None,
                payload=PointPayload(
                    user=summary.user,
                    kind=KIND,
                    text=summary.text,
                    session=summary.session,
                    event_id=summary.summary_id,
                    created_at=summary.created_at,
                    extra=summary.extra,
                ),
                # Weighed as a message's own words are (`episodic_context`).
                index_text=in_context([summary.text], 0, 0, 0, OWN if self._index_context else 1),
            )
            index = await self._index(summary.token_id, target)
            await self._executor.run(partial(index.upsert, [point]))

    async def _index(self, token_id: int, target: ShardTarget) -> VectorIndex:
        return await self._executor.run(
            lambda: self._engine.index(token_id, target.model_id, target.dims)
        )

    async def purge(self, token_id: int) -> None:
        await self._executor.run(lambda: self._engine.drop_token(token_id))
        if self._generations is not None:
            await self._generations.purge(token_id)

    def describe(self, config: TokenConfig) -> str:
        spec = self._spec(config)
        if not self._enabled:
            return "off (EPISODIC_MEMORY=false)"
        if spec is None:
            return "off"
        if spec.sparse_only:
            return "on (no embedder: BM25 alone)"
        return f"on ({spec.model_id}, {spec.dims} dims, hybrid dense + BM25)"
