"""The one ranking configuration of the Context Forge: every weight, threshold and budget it
ranks and selects with, with its default, its bounds and its documented (camelCase) name.

The same model is the server's defaults (`Ranking()`, the budget from MEMORY_TOKEN_BUDGET),
the validation of a token's `memory.forge` overrides (`tenancy.forge_config`), what the forge
reads at request time (`context.forge`) and what the benchmarks vary (`scripts/bench/`): adding
a weight is one field here. Named presets (`PRESETS`, in the spirit of Graphiti's search-config
recipes) are partial overrides of it, validated when this module is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "PRESETS",
    "RANKED_SOURCES",
    "RANKING_KEYS",
    "Ranking",
    "SourceWeights",
    "partial",
    "preset",
]

# The sources whose items the forge ranks (the others are placed as they come).
RANKED_SOURCES = ("episodic", "longterm")

_Weight = Annotated[float, Field(ge=0.0, le=10.0)]
_Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class SourceWeights(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    dense: _Weight = 1.0
    sparse: _Weight = 1.0


class Ranking(BaseModel):
    """The forge's configuration. Frozen and hashable: one instance per distinct config."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    memory_token_budget: Annotated[StrictInt, Field(ge=1, le=100_000)] = 1500
    dense_weight: _Weight = 1.0
    sparse_weight: _Weight = 1.0
    # (source, dense, sparse), sorted: a tuple keeps the model hashable and frozen. Given as
    # {source: {dense, sparse}}; a token's sources are merged over the defaults'.
    # Episodic candidates have both lists, and with the small local model the keyword list is
    # the stronger one: on the LoCoMo development split, dense 0.5 / sparse 1 gives turn
    # recall@10 0.665 against 0.638 at 1/1 (docs/performance.md). Sources with one list
    # (Mem0's facts) keep the global weights.
    source_weights: tuple[tuple[str, float, float], ...] = (("episodic", 0.5, 1.0),)
    # Weight of a candidate's rank in the relational fetch (memories naming the question's
    # entities, then their co-mentioned ones), fused like the dense and sparse ranks. 0 by
    # default: on every question it cost LoCoMo turn@10 0.037, on relational ones alone 0.011
    # (memories reached through a shared name crowd out direct matches): a token opts in. At
    # 0, memories only the fetch reached are not ranked at all.
    graph_weight: _Weight = 0.0
    # Whether a memory only the relational fetch reached (found by neither the dense nor the
    # keyword search) is ranked when `graph_weight` > 0. False: the graph rank only boosts
    # memories the searches found too (a shared name as more evidence, not as the only one).
    graph_reach: StrictBool = True
    # How much a fresh item gains over an old one. 0 by default: recency is a tie-breaker
    # (on equal scores the newer item ranks first, `context.forge.rank`), not a weight. At 0.1
    # it cost LoCoMo turn@10 0.013 with every message stored at its session's date
    # (docs/performance.md); what is stale is superseded or, opted in, fades. A token may
    # weigh it.
    recency_weight: _Weight = 0.0
    half_life_days: Annotated[float, Field(gt=0.0, le=36_500.0)] = 30.0
    importance_weight: _Weight = 0.1
    # Fading (`context.forge.fade`): an item's score decays with the time since it was last
    # injected (or, never injected, since it was made), halving every `fade_half_life_days`
    # stretched by its importance; under `fade_floor` it is dropped (`faded`), never deleted.
    # 0 days: off (the default), nothing read or recorded.
    fade_half_life_days: Annotated[float, Field(ge=0.0, le=36_500.0)] = 0.0
    fade_floor: _Unit = 0.1
    # On the final score, whose best possible value is ~(dense + sparse) / 61 + a little.
    min_score: _Unit = 0.0
    # The relevance floor (`context.forge.floor`): a request's ranked items are injected only
    # when one of them has a cosine with the query of at least `dense_floor` or contains at
    # least `sparse_floor` of the query's keyword terms (all but one for a query of two or
    # three terms); then each must reach `noise_share` of
    # a floor. 0.5 is where the local MiniLM separates a related from an unrelated message;
    # an API embedder with another scale sets its own (docs/decisions.md). 0 turns a floor off.
    dense_floor: _Unit = 0.5
    sparse_floor: _Unit = 0.7
    noise_share: _Unit = 0.5
    near_duplicate: Annotated[float, Field(ge=0.5, le=1.0)] = 0.95
    # Whether the intent of the user's message (`context.forge.intent`) picks the preset of
    # that name ("temporal", "relational", "preference", "factual") under the token's values.
    intent_weights: StrictBool = True

    @field_validator(
        "dense_weight",
        "sparse_weight",
        "graph_weight",
        "recency_weight",
        "half_life_days",
        "importance_weight",
        "fade_half_life_days",
        "fade_floor",
        "min_score",
        "dense_floor",
        "sparse_floor",
        "noise_share",
        "near_duplicate",
        mode="before",
    )
    @classmethod
    def _number(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("source_weights", mode="before")
    @classmethod
    def _per_source(cls, value: object) -> object:
        if isinstance(value, tuple):  # already parsed (a copy, a default)
            return value
        if not isinstance(value, dict):
            raise ValueError("must be a JSON object of source -> {dense, sparse}")
        out = []
        for source, weights in value.items():
            if source not in RANKED_SOURCES:
                raise ValueError(f"unknown source (ranked sources: {', '.join(RANKED_SOURCES)})")
            if not isinstance(weights, dict):
                raise ValueError("each source's weights must be a JSON object {dense, sparse}")
            for key, number in weights.items():
                if key not in ("dense", "sparse"):
                    raise ValueError("a source's weights are 'dense' and 'sparse'")
                if isinstance(number, bool) or not isinstance(number, int | float):
                    raise ValueError("a source's weights must be numbers")
            try:
                parsed = SourceWeights.model_validate(weights)
            except ValidationError:
                raise ValueError("a source's weights must be between 0 and 10") from None
            out.append((str(source), parsed.dense, parsed.sparse))
        return tuple(sorted(out))

    @property
    def per_source(self) -> Mapping[str, tuple[float, float]]:
        """(dense, sparse) of a source's candidates, where they differ from the global ones."""
        return {s: (d, sp) for s, d, sp in self.source_weights}

    def updated(self, values: Mapping[str, Any]) -> Ranking:
        """This configuration with `values` (already validated) replacing its own; source
        weights are merged, source by source."""
        update = dict(values)
        if "source_weights" in update:
            merged = {**self.per_source, **{s: (d, sp) for s, d, sp in update["source_weights"]}}
            update["source_weights"] = tuple(sorted((s, d, sp) for s, (d, sp) in merged.items()))
        return self.model_copy(update=update)


# snake_case (the model's names) → camelCase (the documented spelling).
RANKING_KEYS: Mapping[str, str] = MappingProxyType(
    {name: field.alias or name for name, field in Ranking.model_fields.items()}
)


def partial(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """Validated values of a partial configuration (only the fields it names, by their snake
    or camel name); raises pydantic's ValidationError."""
    parsed = Ranking.model_validate(dict(values))
    return MappingProxyType({name: getattr(parsed, name) for name in parsed.model_fields_set})


# Named partial configurations, applied over a base: the benchmarks' variants and the intents'
# weights name them. "default" changes nothing.
PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "default": partial({}),
        # Keyword ranking only: what a token without an embedder gets anyway.
        "keyword": partial({"dense_weight": 0.0, "source_weights": {"episodic": {"dense": 0}}}),
        # Both lists equal, as the engine fetches them.
        "balanced": partial({"source_weights": {"episodic": {"dense": 1, "sparse": 1}}}),
        # Everything ranked is injected, however unrelated (the forge before the floor).
        "no_floor": partial({"dense_floor": 0, "sparse_floor": 0}),
        "no_intent": partial({"intent_weights": False}),
        "graph": partial({"graph_weight": 1.0}),
        # The graph rank as a boost of what the searches found, never a memory of its own.
        "graph_boost": partial({"graph_weight": 1.0, "graph_reach": False}),
        # The intents' presets (`context.forge.intent`, which says why).
        # A "when" question asks about a moment, not about the latest: weighing recency (0.3)
        # cost LoCoMo's temporal questions 0.017 turn@10 on dated storage (docs/performance.md).
        "temporal": partial({}),
        "relational": partial({"source_weights": {"episodic": {"dense": 0.25, "sparse": 1}}}),
        "preference": partial({"source_weights": {"episodic": {"dense": 0.75, "sparse": 1}}}),
        "factual": partial({}),
    }
)


def preset(name: str, base: Ranking | None = None) -> Ranking:
    """The named preset applied over `base` (the defaults without one)."""
    try:
        values = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r} (one of {', '.join(PRESETS)})") from None
    return (base or Ranking()).updated(values)
