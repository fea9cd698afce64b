"""The token's `memory.forge` and `memory.placement`: how recalled memory is ranked, budgeted
and laid out for this token.

Every forge field is optional: a field left out keeps the server's default (the budget from
MEMORY_TOKEN_BUDGET, the weights from `context.forge.rank` and `context.forge.select`), so a
token says only what it changes. Values are bounded: a weight of 1e9 or a budget of a million
tokens is a mistake, and is refused when the token is saved (a 422 naming the field).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from memory_bridge.tenancy.errors import TokenConfigError

__all__ = [
    "FORGE_KEYS",
    "RANKED_SOURCES",
    "ForgeConfig",
    "Placement",
    "parse_forge",
    "parse_placement",
]

Placement = Literal["stable", "reference_first"]

# The sources whose items the forge ranks (the others are placed as they come).
RANKED_SOURCES = ("episodic", "longterm")

_Weight = Annotated[float, Field(ge=0.0, le=10.0)]

# snake_case (the model's names) → camelCase (the documented spelling).
FORGE_KEYS = {
    "memory_token_budget": "memoryTokenBudget",
    "dense_weight": "denseWeight",
    "sparse_weight": "sparseWeight",
    "source_weights": "sourceWeights",
    "recency_weight": "recencyWeight",
    "half_life_days": "halfLifeDays",
    "importance_weight": "importanceWeight",
    "min_score": "minScore",
    "near_duplicate": "nearDuplicate",
}


class SourceWeights(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    dense: _Weight = 1.0
    sparse: _Weight = 1.0


class ForgeConfig(BaseModel):
    """Overrides of the forge's defaults; None: the server's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_token_budget: Annotated[StrictInt, Field(ge=1, le=100_000)] | None = None
    dense_weight: _Weight | None = None
    sparse_weight: _Weight | None = None
    # (source, dense, sparse), sorted: a tuple keeps the model hashable and frozen.
    source_weights: tuple[tuple[str, float, float], ...] | None = None
    recency_weight: _Weight | None = None
    half_life_days: Annotated[float, Field(gt=0.0, le=36_500.0)] | None = None
    importance_weight: _Weight | None = None
    # On the final score, whose best possible value is ~(dense + sparse) / 61 + a little.
    min_score: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    near_duplicate: Annotated[float, Field(ge=0.5, le=1.0)] | None = None

    @field_validator(
        "dense_weight",
        "sparse_weight",
        "recency_weight",
        "half_life_days",
        "importance_weight",
        "min_score",
        "near_duplicate",
        mode="before",
    )
    @classmethod
    def _number(cls, value: object) -> object:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError("must be a number")
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("source_weights", mode="before")
    @classmethod
    def _per_source(cls, value: object) -> object:
        if value is None:
            return None
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
        return {s: (d, sp) for s, d, sp in self.source_weights or ()}

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in FORGE_KEYS)


def parse_placement(value: object, where: str) -> Placement:
    if value is None:
        return "stable"
    if value == "stable":
        return "stable"
    if value == "reference_first":
        return "reference_first"
    raise TokenConfigError(where, "must be 'stable' or 'reference_first'")


def parse_forge(
    raw: object,
    prefix: str,
    normalize: Callable[
        [dict[Any, Any], dict[str, str], str], tuple[dict[str, Any], dict[str, str]]
    ],
) -> ForgeConfig | None:
    """Validate `memory.forge` (None: no overrides); raise TokenConfigError naming the field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TokenConfigError(prefix, "must be a JSON object")
    values, spelled = normalize(raw, FORGE_KEYS, prefix)
    try:
        parsed = ForgeConfig.model_validate(values)
    except ValidationError as exc:
        # Only the location and pydantic's fixed message: never the submitted input.
        err = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        name = str(err["loc"][0])
        where = f"{prefix}.{spelled.get(name, FORGE_KEYS.get(name, name))}"
        raise TokenConfigError(where, err["msg"].removeprefix("Value error, ")) from None
    return None if parsed.empty else parsed
