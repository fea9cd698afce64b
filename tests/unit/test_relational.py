"""The relational fetch's walk on a real embedded shard: depth 1 (memories naming the
question's entity), depth 2 (memories naming an entity co-mentioned with it), hubs not
followed, ranks depth first, and only the asking end user's memories (a token is a shard)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_bridge.core.entities import extract
from memory_bridge.sources.relational import HUB, traverse
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.index import PointPayload, VectorIndex, VectorPoint

KIND = "episodic"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EdgeEngine]:
    made = EdgeEngine(tmp_path)
    try:
        yield made
    finally:
        made.close()


def _store(index: VectorIndex, user: str, *texts: str) -> None:
    index.upsert(
        [
            VectorPoint(
                id=str(uuid.uuid4()),
                dense=None,
                payload=PointPayload(
                    user=user,
                    kind=KIND,
                    text=text,
                    created_at=float(i),
                    entities=tuple(e.key for e in extract(text)),
                ),
            )
            for i, text in enumerate(texts)
        ]
    )


def _walk(index: VectorIndex, user: str, question: str) -> list[tuple[str, int, str]]:
    seeds = [e.key for e in extract(question)]
    return [(g.point.payload.text, g.depth, g.via) for g in traverse(index, user, KIND, seeds)]


def test_depth_one_then_two_by_co_mention(engine: EdgeEngine) -> None:
    index = engine.index(1, "none:bm25", 0)
    _store(
        index,
        "ada",
        "Ingrid started a pottery class",
        "Ingrid moved to Trondheim",
        "Trondheim has a great harbour",
        "I bought a red kayak",
    )
    walked = _walk(index, "ada", "What do you know about Trondheim?")
    # Depth first; at one depth the newest first.
    assert walked == [
        ("Trondheim has a great harbour", 1, "trondheim"),
        ("Ingrid moved to Trondheim", 1, "trondheim"),
        ("Ingrid started a pottery class", 2, "ingrid"),
    ]
    assert _walk(index, "ada", "Tell me about kayaks") == []  # no entity named


def test_only_the_asking_users_memories(engine: EdgeEngine) -> None:
    index = engine.index(1, "none:bm25", 0)
    _store(index, "ada", "Ingrid moved to Trondheim")
    _store(index, "bob", "Trondheim is rainy", "Ingrid is my cousin")
    assert _walk(index, "ada", "Trondheim?") == [("Ingrid moved to Trondheim", 1, "trondheim")]
    other_token = engine.index(2, "none:bm25", 0)
    assert _walk(other_token, "ada", "Trondheim?") == []


def test_an_entity_named_everywhere_is_not_followed(engine: EdgeEngine) -> None:
    index = engine.index(1, "none:bm25", 0)
    _store(index, "ada", *(f"Caroline said thing number {i}" for i in range(HUB + 1)))
    _store(index, "ada", "Caroline went to Lisbon")
    walked = _walk(index, "ada", "When did Caroline go to Lisbon?")
    # "caroline" is a hub: only the Lisbon memory, through "lisbon".
    assert walked == [("Caroline went to Lisbon", 1, "lisbon")]


async def test_recall_walks_only_for_a_token_that_weighs_the_walk(tmp_path: Path) -> None:
    """The walk is work on the request's path: a token whose `graphWeight` is 0 (the default)
    gets none, and the one that weighs it gets the memories it reaches."""
    import httpx

    from memory_bridge.core.blocking import BlockingExecutor
    from memory_bridge.core.messages import Message
    from memory_bridge.core.turn import Reply, Scope, Turn
    from memory_bridge.embedding.embedders import Embedders
    from memory_bridge.sources.base import Exchange
    from memory_bridge.sources.episodic import EpisodicMemory
    from memory_bridge.tenancy.config import TokenConfig

    engine = EdgeEngine(tmp_path / "edge")
    executor = BlockingExecutor(1, "test")
    client = httpx.AsyncClient()
    memory = EpisodicMemory(engine, Embedders(client, executor), executor, 30.0, 30.0)
    plain = TokenConfig(name="plain", llm_base_url="http://127.0.0.1:9")
    weighing = TokenConfig(
        name="graph", llm_base_url="http://127.0.0.1:9", memory={"forge": {"graphWeight": 1}}
    )
    try:
        said = "Ingrid started a pottery class in Trondheim."
        scope = Scope(token_id=1, user="u", session="a")
        new = (Message(role="user", content=said),)
        turn = Turn("e1", scope, plain, new, said)
        await memory.remember(Exchange(turn, new, Reply(content="Nice!"), event_id="e1"))
        question = "Who lives in Trondheim?"
        asked = (Message(role="user", content=question),)

        async def graph_ranks(config: TokenConfig) -> list[int | None]:
            ask = Turn("q", Scope(token_id=1, user="u", session="b"), config, asked, question)
            return [c.graph_rank for c in (await memory.recall(ask)).candidates]

        assert not memory.walks(plain) and memory.walks(weighing)
        found = await graph_ranks(plain)
        assert found and all(r is None for r in found)  # found by its words, not walked to
        assert 1 in await graph_ranks(weighing)  # "trondheim" reached it too
    finally:
        await client.aclose()
        await executor.shutdown(5.0)
        engine.close()
