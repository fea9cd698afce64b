"""A token's `memory.forge` and `memory.placement`: bounded values, named errors, and the
forge rules they make (the server's defaults where a field is left out)."""

from __future__ import annotations

from typing import Any

import pytest

from memory_bridge.context.forge.pipeline import ForgeRules
from memory_bridge.context.forge.rank import DEFAULT_PER_SOURCE, RankWeights
from memory_bridge.context.forge.select import SelectRules
from memory_bridge.tenancy.config import TokenConfigError
from memory_bridge.tenancy.memory_config import parse_memory_config


def _error(raw: dict[str, Any]) -> str:
    with pytest.raises(TokenConfigError) as info:
        parse_memory_config(raw)
    return str(info.value)


def test_defaults_are_the_server_rules_and_the_stable_layout() -> None:
    cfg = parse_memory_config(None)
    assert (cfg.placement, cfg.forge) == ("stable", None)
    assert parse_memory_config({"forge": {}}).forge is None
    base = ForgeRules(rules=SelectRules(budget_tokens=1234))
    assert base.for_token(None) is base


@pytest.mark.parametrize("mode", ["curated", "hybrid", "off", None])
def test_every_mode_reads_layout_and_forge(mode: str | None) -> None:
    raw: dict[str, Any] = {"placement": "reference_first", "forge": {"memoryTokenBudget": 7}}
    if mode == "hybrid":
        raw["gateway"] = {"baseUrl": "http://127.0.0.1:1", "userId": "u", "userKey": "k"}
    if mode is not None:
        raw["mode"] = mode
    cfg = parse_memory_config(raw)
    assert cfg.placement == "reference_first"
    assert cfg.forge is not None and cfg.forge.memory_token_budget == 7


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
    base = ForgeRules(rules=SelectRules(budget_tokens=1500))
    rules = base.for_token(cfg.forge)
    assert rules.rules == SelectRules(budget_tokens=40, min_score=0.01, near_duplicate=0.95)
    defaults = RankWeights()
    assert (rules.weights.dense, rules.weights.sparse) == (2.0, defaults.sparse)
    assert (rules.weights.recency, rules.weights.importance) == (0.0, defaults.importance)
    assert rules.weights.half_life_days == defaults.half_life_days
    # The episodic default stays; the named source gets its own weights.
    assert rules.weights.per_source == {**DEFAULT_PER_SOURCE, "longterm": (1.0, 0.25)}


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
