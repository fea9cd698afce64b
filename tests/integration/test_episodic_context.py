"""Context indexing across a session's turns, on a real embedded shard: a message's keyword
side holds the message before it and the one after it even when they are in other turns (the
earlier turn's last message is indexed again, keeping its vector and payload), never another
session's nor a turn more than a day older, and explicit facts get no neighbours."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Reply, Scope, Turn
from memory_bridge.embedding.embedders import SPARSE_ONLY, Embedders, EmbedderSpec
from memory_bridge.sources.base import Exchange
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.vectors.edge import EdgeEngine

CONFIG = TokenConfig(name="ctx", llm_base_url="http://127.0.0.1:9")
HASHED = EmbedderSpec("test", "hashed-words", 16)


class HashedWords(Embedders):
    """A deterministic bag of hashed words: a real vector per text, no model."""

    async def embed(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        if spec.sparse_only:
            return await super().embed(spec, texts)
        out = []
        for text in texts:
            vector = [0.0] * spec.dims
            for word in text.lower().split():
                vector[hashlib.sha256(word.encode()).digest()[0] % spec.dims] += 1.0
            out.append(vector)
        return out


@dataclass
class Memory:
    episodic: EpisodicMemory
    engine: EdgeEngine
    clock: list[float]


async def _memory(tmp_path: Path, spec: EmbedderSpec) -> AsyncIterator[Memory]:
    engine = EdgeEngine(tmp_path / "edge")
    executor = BlockingExecutor(1, "test")
    client = httpx.AsyncClient()
    clock = [1000.0]
    embedders = HashedWords(client, executor)
    episodic = EpisodicMemory(
        engine, embedders, executor, 30.0, 30.0, default_embedder=spec, clock=lambda: clock[0]
    )
    try:
        yield Memory(episodic, engine, clock)
    finally:
        await client.aclose()
        await executor.shutdown(5.0)
        engine.close()


@pytest.fixture
async def sparse(tmp_path: Path) -> AsyncIterator[Memory]:
    async for made in _memory(tmp_path, SPARSE_ONLY):
        yield made


@pytest.fixture
async def dense(tmp_path: Path) -> AsyncIterator[Memory]:
    async for made in _memory(tmp_path, HASHED):
        yield made


async def _say(
    memory: Memory,
    event: str,
    session: str,
    said: list[str],
    reply: str | None,
    *,
    explicit: bool = False,
) -> None:
    memory.clock[0] += 60.0
    scope = Scope(token_id=1, user="ada", session=session)
    new = tuple(Message(role="user", content=text) for text in said)
    turn = Turn(event, scope, CONFIG, new, said[-1])
    exchange = Exchange(turn, new, Reply(content=reply), event_id=event, explicit=explicit)
    await memory.episodic.remember(exchange)


async def _found_by_words(memory: Memory, question: str) -> set[str]:
    """The texts the keyword list found for `question`."""
    ask = Turn("q", Scope(token_id=1, user="ada", session="later"), CONFIG, (), question)
    recall = await memory.episodic.recall(ask)
    return {c.text for c in recall.candidates if c.sparse_rank is not None}


async def test_a_reply_is_found_by_the_next_turns_words_and_that_turn_by_the_reply(
    sparse: Memory,
) -> None:
    await _say(
        sparse,
        "e1",
        "s",
        ["We drove along the coast.", "Did you ever visit the lighthouse?"],
        "Yes, last summer with Ingrid.",
    )
    await _say(sparse, "e2", "s", ["The fog there was thick as soup."], "Sounds moody.")
    # The earlier turn's reply now holds the next turn's first message: found by its words.
    assert await _found_by_words(sparse, "thick fog soup") == {
        "Yes, last summer with Ingrid.",
        "The fog there was thick as soup.",
        "Sounds moody.",  # its reply, as before
    }
    # And the next turn's first message holds the reply before it.
    assert "The fog there was thick as soup." in await _found_by_words(sparse, "Ingrid")
    # The message before the reply was not indexed again: it keeps its own context.
    assert "Did you ever visit the lighthouse?" not in await _found_by_words(sparse, "fog soup")


async def test_no_context_from_a_turn_more_than_a_day_older(sparse: Memory) -> None:
    await _say(sparse, "e1", "s", ["Shall we meet on Friday?"], "Friday works.")
    sparse.clock[0] += 2 * 86400.0
    await _say(sparse, "e2", "s", ["The concert was sold out."], "What a pity.")
    assert await _found_by_words(sparse, "concert sold") == {
        "The concert was sold out.",
        "What a pity.",
    }
    sparse.clock[0] += 3600.0  # an hour later: a neighbour again
    await _say(sparse, "e3", "s", ["Maybe the matinee then."], "Good idea.")
    assert "What a pity." in await _found_by_words(sparse, "matinee")


async def test_no_context_from_another_session_or_for_explicit_facts(sparse: Memory) -> None:
    await _say(sparse, "e1", "s", ["My bike has a flat tyre."], "Patch it tonight.")
    await _say(sparse, "e2", "t", ["The bakery opens at seven."], "Good to know.")
    await _say(sparse, "e3", "s", ["Where is the pump?"], "In the shed.")
    assert await _found_by_words(sparse, "bakery seven") == {
        "The bakery opens at seven.",
        "Good to know.",
    }
    await _say(sparse, "f1", "mcp", ["Ada is allergic to peanuts."], None, explicit=True)
    await _say(sparse, "f2", "mcp", ["Ada plays the cello."], None, explicit=True)
    assert await _found_by_words(sparse, "cello") == {"Ada plays the cello."}
    assert await _found_by_words(sparse, "peanuts allergic") == {"Ada is allergic to peanuts."}


async def test_a_message_indexed_again_keeps_its_vector_and_payload(dense: Memory) -> None:
    await _say(dense, "e1", "s", ["Any plans for the weekend?"], "Hiking near Bergen.")
    index = dense.engine.existing(1, HASHED.model_id, HASHED.dims)
    assert index is not None
    before = {p.id: p for p in index.scroll(with_dense=True)}
    await _say(dense, "e2", "s", ["Bring rain gear, it pours there."], "Will do.")
    assert "Hiking near Bergen." in await _found_by_words(dense, "rain gear pours")
    after = {p.id: p for p in index.scroll(with_dense=True)}
    assert len(after) == 4
    for point_id, point in before.items():
        assert after[point_id].payload == point.payload
        assert after[point_id].dense == point.dense and point.dense
