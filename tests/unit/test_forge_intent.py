"""The intent of a user's message, by rules (English and Chinese), and the ranking it gives:
the server's, the intent's preset, then the token's own values (which win)."""

from __future__ import annotations

import pytest

from memory_bridge.context.forge.intent import Intent, classify, ranking_for
from memory_bridge.tenancy.memory_config import parse_memory_config
from memory_bridge.tenancy.ranking import Ranking, preset

PLACE = "Ingrid moved to Trondheim"


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("When did Caroline move to Sweden?", Intent.TEMPORAL),
        ("What time is my dentist appointment?", Intent.TEMPORAL),
        ("我什么时候去的北京？", Intent.TEMPORAL),
        ("Who did Ada go hiking with?", Intent.RELATIONAL),
        ("Whose birthday was it?", Intent.RELATIONAL),
        ("我和谁一起去的？", Intent.RELATIONAL),
        ("What is my favourite colour?", Intent.PREFERENCE),
        ("Which books do I enjoy?", Intent.PREFERENCE),
        ("Does Ada like jazz?", Intent.PREFERENCE),
        ("我喜欢吃什么？", Intent.PREFERENCE),
        ("What did the box look like?", Intent.FACTUAL),
        ("Where does Ingrid live?", Intent.FACTUAL),
        ("", Intent.FACTUAL),
    ],
)
def test_rules_read_the_intent(text: str, intent: Intent) -> None:
    assert classify(text) == intent


def test_each_intent_has_its_weights_and_the_token_keeps_the_last_word() -> None:
    base = Ranking(memory_token_budget=900)
    temporal = ranking_for(base, None, Intent.TEMPORAL)
    relational = ranking_for(base, None, Intent.RELATIONAL)
    assert ranking_for(base, None, Intent.FACTUAL) == base
    # A "when" question asks about a moment, not about the latest: no recency weight.
    assert temporal == base and temporal.recency_weight == 0
    assert relational.per_source["episodic"][0] < base.per_source["episodic"][0]
    assert temporal != relational and relational.memory_token_budget == 900
    # The token's explicit value wins over the intent's preset; the rest of it still applies.
    forge = parse_memory_config(
        {"forge": {"sourceWeights": {"episodic": {"dense": 0.9}}, "recencyWeight": 0.05}}
    ).forge
    own = ranking_for(base, forge, Intent.RELATIONAL)
    assert (own.per_source["episodic"], own.recency_weight) == ((0.9, 1.0), 0.05)
    assert ranking_for(base, forge, Intent.TEMPORAL).recency_weight == 0.05
    # And a token may turn the presets off.
    off = parse_memory_config({"forge": {"intentWeights": False}}).forge
    assert ranking_for(base, off, Intent.RELATIONAL) == ranking_for(base, off, Intent.FACTUAL)
    refused = "memory.forge.intentWeights"
    with pytest.raises(ValueError, match=refused):
        parse_memory_config({"forge": {"intentWeights": "no"}})


def test_memories_only_the_relational_fetch_reached_count_only_when_it_weighs() -> None:
    from memory_bridge.context.forge.pipeline import forge
    from memory_bridge.core.candidates import Candidate
    from memory_bridge.core.messages import Message
    from memory_bridge.sources.base import Recall

    walked = Candidate("episodic", "g", "Ingrid started a pottery class", graph_rank=1)
    direct = Candidate("episodic", "d", PLACE, sparse_rank=1, graph_rank=2)
    recall = Recall(source="episodic", candidates=(walked, direct))
    request = [Message(role="user", content="Who do I know in Trondheim?")]

    def kept(ranking: Ranking) -> tuple[str, ...]:
        return forge([recall], request, ranking, lambda t: len(t.split()), 0.0).recalls[0].memories

    assert kept(Ranking()) == (PLACE,)  # weight 0: not ranked at all
    assert set(kept(preset("graph"))) == {PLACE, "Ingrid started a pottery class"}
    # As a boost only: the walk raises what the searches found, adds nothing of its own.
    assert kept(preset("graph_boost")) == (PLACE,)
