"""The token's `memory.forge` and `memory.placement`: how recalled memory is ranked, budgeted
and laid out for this token.

`memory.forge` holds overrides of the one ranking configuration (`tenancy.ranking.Ranking`):
every field is optional, and a field left out keeps the server's default (the budget from
MEMORY_TOKEN_BUDGET, the rest `Ranking`'s defaults), so a token says only what it changes.
Values are bounded by that model: a weight of 1e9 or a budget of a million tokens is a
mistake, and is refused when the token is saved (a 422 naming the field).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from memory_bridge.tenancy.errors import TokenConfigError
from memory_bridge.tenancy.ranking import RANKED_SOURCES, RANKING_KEYS, Ranking

__all__ = [
    "FORGE_KEYS",
    "RANKED_SOURCES",
    "ForgeConfig",
    "Placement",
    "parse_forge",
    "parse_placement",
]

Placement = Literal["stable", "reference_first"]

FORGE_KEYS = RANKING_KEYS


class ForgeConfig(BaseModel):
    """A token's overrides: the fields it names (`given`) of a validated `Ranking`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ranking: Ranking = Ranking()
    given: frozenset[str] = frozenset()

    @property
    def values(self) -> Mapping[str, Any]:
        return {name: getattr(self.ranking, name) for name in sorted(self.given)}

    @property
    def per_source(self) -> Mapping[str, tuple[float, float]]:
        return self.ranking.per_source if "source_weights" in self.given else {}

    def apply(self, base: Ranking) -> Ranking:
        """`base` with these overrides (source weights merged source by source)."""
        return base.updated(self.values) if self.given else base


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
    values, spelled = normalize(raw, dict(FORGE_KEYS), prefix)
    try:
        parsed = Ranking.model_validate(values)
    except ValidationError as exc:
        # Only the location and pydantic's fixed message: never the submitted input.
        err = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        name = str(err["loc"][0])
        where = f"{prefix}.{spelled.get(name, FORGE_KEYS.get(name, name))}"
        raise TokenConfigError(where, err["msg"].removeprefix("Value error, ")) from None
    given = frozenset(parsed.model_fields_set)
    return ForgeConfig(ranking=parsed, given=given) if given else None
