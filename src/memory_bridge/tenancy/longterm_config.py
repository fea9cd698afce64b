"""The token's `memory.longterm`: how new long-term facts are consolidated with older ones.

`consolidation` is `"dedup"` (the default: exact and near duplicates of an end user's facts
merge, with no LLM call), `"judge"` (besides, a fact similar to older ones but not the same is
judged by the token's memory LLM: duplicate, update or unrelated; one call per new fact) or
`"off"`. `summaries` turns on session summaries (`summaryTurns`: after how many turns not
yet summarised a busy session is summarised without waiting for it to go idle). The thresholds
are cosines of the facts' embeddings, bounded; a value out of bounds is refused when the token
is saved (a 422 naming the field).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
)

from memory_bridge.tenancy.errors import TokenConfigError

__all__ = ["LONGTERM_KEYS", "Consolidation", "LongTermConfig", "parse_longterm"]

Consolidation = Literal["off", "dedup", "judge"]

# snake_case (the model's names) → camelCase (the documented spelling).
LONGTERM_KEYS = {
    "consolidation": "consolidation",
    "near_duplicate": "nearDuplicate",
    "similarity_floor": "similarityFloor",
    "max_judged": "maxJudged",
    "summaries": "summaries",
    "summary_turns": "summaryTurns",
}


class LongTermConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    consolidation: Consolidation = "dedup"
    # At or above: the same fact said again (merged with no LLM call).
    near_duplicate: Annotated[float, Field(ge=0.8, le=1.0)] = 0.95
    # At or above (and below `near_duplicate`): similar enough to ask the memory LLM about.
    similarity_floor: Annotated[float, Field(ge=0.3, le=1.0)] = 0.6
    # How many of the nearest older facts one judgement covers.
    max_judged: Annotated[StrictInt, Field(ge=1, le=10)] = 5
    # Session summaries by the memory LLM (sources.summaries): when a session has been idle
    # SUMMARY_IDLE_SECONDS, or has this many turns not yet summarised.
    summaries: StrictBool = False
    summary_turns: Annotated[StrictInt, Field(ge=2, le=500)] = 20

    @field_validator("near_duplicate", "similarity_floor", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


DEFAULT = LongTermConfig()


def parse_longterm(
    raw: object,
    prefix: str,
    normalize: Callable[
        [dict[Any, Any], dict[str, str], str], tuple[dict[str, Any], dict[str, str]]
    ],
) -> LongTermConfig:
    """Validate `memory.longterm` (None: the defaults); raise TokenConfigError naming the field."""
    if raw is None:
        return DEFAULT
    if not isinstance(raw, dict):
        raise TokenConfigError(prefix, "must be a JSON object")
    values, spelled = normalize(raw, LONGTERM_KEYS, prefix)
    try:
        parsed = LongTermConfig.model_validate(values)
    except ValidationError as exc:
        # Only the location and pydantic's fixed message: never the submitted input.
        err = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        where = f"{prefix}.{spelled.get(name, LONGTERM_KEYS.get(name, name))}"
        raise TokenConfigError(where, err["msg"].removeprefix("Value error, ")) from None
    if parsed.similarity_floor > parsed.near_duplicate:
        raise TokenConfigError(f"{prefix}.similarityFloor", "must not exceed nearDuplicate")
    return parsed
