"""What the user's message asks for, by rules (no model): temporal ("when…"), relational
("who… with…"), preference ("favourite…", "do I like…") or factual (anything else); English
and Chinese. Each intent names a preset of the ranking configuration (`tenancy.ranking`),
applied over the server's ranking before the token's own `memory.forge` values, so a token's
explicit weights always win and `intentWeights: false` turns the presets off.

Why these presets: a relational question names people and places, which are exact words
(the keyword list counts more); a preference is said in many ways ("I love…", "my favourite…":
meaning counts more); a temporal question asks when something happened, not about the latest
thing, so it keeps the defaults (weighing recency cost LoCoMo's temporal questions, whose
answers are in every session alike), as a factual question does.
"""

from __future__ import annotations

import re
from enum import StrEnum

from memory_bridge.tenancy.forge_config import ForgeConfig
from memory_bridge.tenancy.ranking import PRESETS, Ranking

__all__ = ["Intent", "classify", "ranking_for"]


class Intent(StrEnum):
    TEMPORAL = "temporal"
    RELATIONAL = "relational"
    PREFERENCE = "preference"
    FACTUAL = "factual"


_TEMPORAL = re.compile(
    r"\b(when|what time|what date|which (year|month|day|week)|how long ago|since when"
    r"|what year|what month|what day)\b|什么时候|何时|哪年|哪一年|哪天|几点|几月|多久以前",
    re.IGNORECASE,
)
_RELATIONAL = re.compile(
    r"\b(who|whom|whose|with whom)\b|\b(friends?|family|married|relationship|partner|"
    r"colleagues?|met)\b.*\bwith\b|谁|和谁|跟谁|关系",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(favou?rites?|prefers?|preferred|preference|enjoys?|fan of)\b"
    r"|\b(do|does|did|would)\s+\w+\s+(like|love|hate|dislike)\b|喜欢|最爱|偏好|爱吃|讨厌",
    re.IGNORECASE,
)
MAX_CHARS = 2000  # the rules read the start of a long message only


def classify(text: str) -> Intent:
    """The intent of a user's message; the first rule that matches wins, in this order."""
    head = text[:MAX_CHARS]
    if _TEMPORAL.search(head):
        return Intent.TEMPORAL
    if _RELATIONAL.search(head):
        return Intent.RELATIONAL
    if _PREFERENCE.search(head):
        return Intent.PREFERENCE
    return Intent.FACTUAL


def ranking_for(base: Ranking, overrides: ForgeConfig | None, intent: Intent) -> Ranking:
    """The ranking of a request: the server's, the intent's preset, then the token's own
    values (which win over the preset)."""
    own = base if overrides is None else overrides.apply(base)
    if not own.intent_weights:
        return own
    with_intent = base.updated(PRESETS[str(intent)])
    return with_intent if overrides is None else overrides.apply(with_intent)
