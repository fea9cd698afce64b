"""A token's `memory.forge` and `memory.placement`: bounded values, named errors, and the
forge rules they make (the server's defaults where a field is left out)."""

from __future__ import annotations

from typing import Any

import pytest

from memory_bridge.tenancy.config import TokenConfigError
from memory_bridge.tenancy.memory_config import parse_memory_config
from memory_bridge.tenancy.ranking import PRESETS, RANKING_KEYS, Ranking, preset


def _error(raw: dict[str, Any]) -> str:
    with pytest.raises(TokenConfigError) as info:
        parse_memory_config(raw)
    return str(info.value)


def test_defaults_are_the_server_rules_and_the_stable_layout() -> None:
    cfg = parse_memory_config(None)
    assert (cfg.placement, cfg.forge) == ("stable", None)
    assert parse_memory_config({"forge": {}}).forge is None
    base = Ranking(memory_token_budget=1234)
    forge = parse_memory_config({"forge": {"denseWeight": 1}}).forge
    assert forge is not None and forge.apply(base) == base  # the default value, named


@pytest.mark.parametrize("mode", ["curated", "hybrid", "off", None])
def test_every_mode_reads_layout_and_forge(mode: str | None) -> None:
    raw: dict[str, Any] = {"placement": "reference_first", "forge": {"memoryTokenBudget": 7}}
    if mode == "hybrid":
        raw["gateway"] = {"baseUrl": "http://127.0.0.1:1", "userId": "u", "userKey": "k"}
    if mode is not None:
        raw["mode"] = mode
    cfg = parse_memory_config(raw)
    assert cfg.placement == "reference_first"
    assert cfg.forge is not None and cfg.forge.values == {"memory_token_budget": 7}


def test_overrides_replace_only_what_they_name() -> None:
    cfg = parse_memory_config(
        {
            "forge": {
                "memory_token_budget": 40,
                "denseWeight": 2,
                "sourceWeights": {"longterm": {"sparse": 0.25}},
                "recencyWeight": 0,
                "minScore": 0.01,
            }
        }
    )
    assert cfg.forge is not None
    base = Ranking(memory_token_budget=1500)
    rules = cfg.forge.apply(base)
    assert (rules.memory_token_budget, rules.min_score, rules.near_duplicate) == (40, 0.01, 0.95)
    defaults = Ranking()
    assert (rules.dense_weight, rules.sparse_weight) == (2.0, defaults.sparse_weight)
    assert (rules.recency_weight, rules.importance_weight) == (0.0, defaults.importance_weight)
    assert rules.half_life_days == defaults.half_life_days
    # The episodic default stays; the named source gets its own weights.
    assert rules.per_source == {**defaults.per_source, "longterm": (1.0, 0.25)}


def test_every_ranking_field_is_a_documented_key_and_presets_are_valid() -> None:
    assert RANKING_KEYS["memory_token_budget"] == "memoryTokenBudget"
    assert set(RANKING_KEYS) == set(Ranking.model_fields)
    assert preset("default") == Ranking()
    keyword = preset("keyword", Ranking(memory_token_budget=9))
    assert keyword.memory_token_budget == 9 and keyword.per_source["episodic"] == (0.0, 1.0)
    assert set(PRESETS) >= {"default", "keyword", "balanced"}
    with pytest.raises(ValueError, match="unknown preset"):
        preset("nope")


@pytest.mark.parametrize(
    ("forge", "field", "why"),
    [
        ({"memoryTokenBudget": 0}, "memory.forge.memoryTokenBudget", "greater than or equal"),
        ({"memory_token_budget": 100_001}, "memory.forge.memory_token_budget", "less than"),
        ({"memoryTokenBudget": 1.5}, "memory.forge.memoryTokenBudget", "integer"),
        ({"denseWeight": -1}, "memory.forge.denseWeight", "greater than or equal"),
        ({"sparseWeight": 11}, "memory.forge.sparseWeight", "less than or equal"),
        ({"recencyWeight": "0.1"}, "memory.forge.recencyWeight", "must be a number"),
        ({"importanceWeight": True}, "memory.forge.importanceWeight", "must be a number"),
        ({"halfLifeDays": 0}, "memory.forge.halfLifeDays", "greater than"),
        ({"minScore": float("nan")}, "memory.forge.minScore", "finite"),
        ({"nearDuplicate": 0.2}, "memory.forge.nearDuplicate", "greater than or equal"),
        ({"sourceWeights": {"gateway": {}}}, "memory.forge.sourceWeights", "unknown source"),
        ({"sourceWeights": {"episodic": 1}}, "memory.forge.sourceWeights", "JSON object"),
        ({"sourceWeights": {"episodic": {"x": 1}}}, "memory.forge.sourceWeights", "'dense'"),
        ({"sourceWeights": {"episodic": {"dense": 99}}}, "memory.forge.sourceWeights", "0 and 10"),
        ({"sourceWeights": []}, "memory.forge.sourceWeights", "JSON object"),
        ({"budget": 5}, "memory.forge.budget", "unknown field"),
    ],
)
def test_bad_forge_values_are_refused_naming_the_field(
    forge: dict[str, Any], field: str, why: str
) -> None:
    message = _error({"forge": forge})
    assert message.startswith(f"{field}: "), message
    assert why in message, message


@pytest.mark.parametrize("value", ["cache", "", 1, ["stable"]])
def test_placement_is_stable_or_reference_first(value: object) -> None:
    assert _error({"placement": value}) == (
        "memory.placement: must be 'stable' or 'reference_first'"
    )
    assert _error({"forge": "x"}) == "memory.forge: must be a JSON object"
