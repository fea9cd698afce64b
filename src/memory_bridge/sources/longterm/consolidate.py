"""Consolidation of long-term facts, the pure part: what counts as the same fact, the memory
LLM's judgement (prompt, answer schema, validation) and the plan it leads to. No I/O here.

For a new fact and its nearest older facts of the same end user (by cosine of embeddings):
- the same fact said again (text equal once case, punctuation and spacing are normalised, or
  cosine at or above `near_duplicate`) is merged into the older one with no LLM call;
- otherwise the older facts at or above `similarity_floor` are judged in ONE call of the
  token's memory LLM, whose answer must be the JSON object
  `{"verdicts": [{"fact": <n>, "relation": "duplicate" | "update" | "unrelated"}]}` with one
  verdict per numbered older fact. `duplicate` merges the new fact into that older one;
  `update` (a change or a contradiction) supersedes the older one; `unrelated` keeps both.
  An answer that does not parse or does not fit the schema keeps both facts (and is logged by
  the caller): it is never guessed at.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memory_bridge.core.timestamps import epoch_of

Relation = Literal["duplicate", "update", "unrelated"]
RELATIONS: tuple[Relation, ...] = ("duplicate", "update", "unrelated")
MAX_ANSWER_CHARS = 20_000

_SPACE = re.compile(r"\s+")

SYSTEM_PROMPT = """You are a Fact Consolidator for a memory store about one user.
You get one NEW fact and a numbered list of EXISTING facts about the same user.
For each existing fact, decide how the new fact relates to it:
- "duplicate": they state the same thing (the new fact adds nothing);
- "update": the new fact changes, corrects or contradicts it (the existing one is now stale);
- "unrelated": both can be true at once, or they are about different things.
Answer with a JSON object only, exactly of this form, one verdict per existing fact:
{"verdicts": [{"fact": 1, "relation": "duplicate"}, {"fact": 2, "relation": "unrelated"}]}"""


@dataclass(frozen=True, slots=True)
class Fact:
    id: str
    text: str
    created_at: str | None = None  # ISO time, as Mem0 keeps it
    score: float = 1.0  # cosine to the new fact (for the older facts)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do with one new fact: merge it into `merge_into`, or supersede `supersede`."""

    merge_into: Fact | None = None
    supersede: tuple[Fact, ...] = ()
    judged: bool = False  # the memory LLM was asked


class InvalidVerdict(ValueError):
    """The memory LLM's answer does not fit the schema (the message says how)."""


def normalised(text: str) -> str:
    """Text compared for sameness: case, punctuation and spacing ignored."""
    kept = "".join(
        " " if unicodedata.category(ch).startswith(("P", "S")) else ch
        for ch in unicodedata.normalize("NFKC", text)
    )
    return _SPACE.sub(" ", kept).strip().casefold()


def same_fact(new: Fact, old: Fact, near_duplicate: float) -> bool:
    return old.score >= near_duplicate or normalised(new.text) == normalised(old.text)


def messages(new: Fact, older: Sequence[Fact]) -> list[dict[str, str]]:
    """The one judgement call's messages."""
    listing = "\n".join(f"{i}. {fact.text}" for i, fact in enumerate(older, 1))
    user = f"NEW fact:\n{new.text}\n\nEXISTING facts:\n{listing}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_verdicts(answer: str, count: int) -> list[Relation]:
    """The relation of each of `count` numbered facts, in order; InvalidVerdict otherwise."""
    text = answer.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    if fenced is not None:
        text = fenced.group(1)
    if len(text) > MAX_ANSWER_CHARS:
        raise InvalidVerdict("the answer is too long")
    try:
        data = json.loads(text)
    except ValueError:
        raise InvalidVerdict("the answer is not JSON") from None
    verdicts = data.get("verdicts") if isinstance(data, dict) else None
    if not isinstance(verdicts, list):
        raise InvalidVerdict("the answer has no 'verdicts' list")
    found: dict[int, Relation] = {}
    for verdict in verdicts:
        if not isinstance(verdict, dict):
            raise InvalidVerdict("a verdict is not an object")
        number, relation = verdict.get("fact"), verdict.get("relation")
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= count:
            raise InvalidVerdict(f"a verdict names no listed fact (1..{count})")
        if relation not in RELATIONS:
            raise InvalidVerdict("a verdict's relation is not duplicate, update or unrelated")
        if number in found:
            raise InvalidVerdict(f"fact {number} has two verdicts")
        found[number] = relation
    if len(found) != count:
        raise InvalidVerdict(f"{count - len(found)} listed fact(s) have no verdict")
    return [found[i] for i in range(1, count + 1)]


def older_than(new: Fact, candidates: Sequence[Fact]) -> list[Fact]:
    """The candidates said before `new` (by date, then id for equal dates), in their order.

    A turn's consolidation may run after the next turn's extraction (they are jobs of two
    consumers): without this, an earlier fact would be judged against a later one and an
    "update" would supersede the newer statement with the older. A fact whose date cannot be
    read is kept: its order is unknown."""
    mine = epoch_of(new.created_at)
    if mine is None:
        return [f for f in candidates if f.id != new.id]
    out = []
    for fact in candidates:
        theirs = epoch_of(fact.created_at)
        if fact.id != new.id and (theirs is None or (theirs, fact.id) < (mine, new.id)):
            out.append(fact)
    return out


def plan_without_llm(new: Fact, older: Sequence[Fact], near_duplicate: float) -> Plan | None:
    """The merge of a fact said again, if `older` (nearest first) holds it; else None."""
    for fact in older:
        if fact.id != new.id and same_fact(new, fact, near_duplicate):
            return Plan(merge_into=fact)
    return None


def to_judge(new: Fact, older: Sequence[Fact], floor: float, limit: int) -> list[Fact]:
    """The older facts worth asking the memory LLM about, nearest first."""
    return [f for f in older if f.id != new.id and f.score >= floor][:limit]


def plan_from_verdicts(judged: Sequence[Fact], relations: Sequence[Relation]) -> Plan:
    for fact, relation in zip(judged, relations, strict=True):
        if relation == "duplicate":
            return Plan(merge_into=fact, judged=True)
    stale = tuple(f for f, r in zip(judged, relations, strict=True) if r == "update")
    return Plan(supersede=stale, judged=True)
