"""Entities named in a text, by rules (no model, no LLM): the first part of the design's
relational fetch (Stage 1.3), shared by what indexes a message and what reads a question.

Found: runs of capitalised words ("Caroline", "New York", "Bank of America"), ended by any
punctuation, not counting a sentence's first word when it is a common one ("When", "My");
quoted titles ("Becoming", “The Four Seasons”, 《三体》); numbers with a unit ("5 km",
"3 years", "$20"); Chinese names marked by a title or kinship word (王老师, 李先生) or a
place suffix (杭州市). Each entity is returned with a normalised key (case-folded, spaces
collapsed), so "new york" in a question meets "New York" in a memory.

What rules miss: lower-case names, Chinese names without a marker, and anything that needs
context to be told apart from a common word. spaCy's small English NER model was measured
against them (docs/decisions.md, "Entities by rules"): no gain in recall, 250 times slower.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Entity", "extract"]

MAX_CHARS = 8000  # a message longer than this is read from its start only
MAX_ENTITIES = 32

# Words that start sentences and questions, capitalised only for that.
_COMMON = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "let",
        "may",
        "me",
        "might",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "ours",
        "she",
        "should",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "would",
        "yes",
        "you",
        "your",
        "yours",
        "also",
        "after",
        "before",
        "during",
        "hello",
        "hi",
        "hey",
        "thanks",
        "thank",
        "please",
        "ok",
        "okay",
        "sure",
        "well",
        "oh",
        "wow",
        "yeah",
        "great",
        "good",
        "nice",
        "yep",
        "yup",
        "nope",
        "cool",
        "awesome",
        "sorry",
        "congrats",
        "congratulations",
        "haha",
        "lol",
        "hmm",
    ]
)
# Not "and": in conversation "Jon and Gina" is two people far more often than one company.
_JOINERS = frozenset({"of", "the", "de", "van", "von", "&"})
_WORD = re.compile(r"[A-Z][\w'’.-]*|[a-z][\w'’-]*|&")
_QUOTED = re.compile(r"\"([^\"]{2,80})\"|“([^”]{2,80})”|《([^》]{1,40})》|「([^」]{1,40})」")
_UNITS = (
    r"km|kms|kilometers?|kilometres?|miles?|m|meters?|metres?|kg|kgs|kilos?|lbs?|pounds?|"
    r"years?|months?|weeks?|days?|hours?|minutes?|percent|%|dollars?|euros?|"
    r"岁|年|个月|天|公里|米|公斤|元|块"
)
_NUMBER_UNIT = re.compile(
    rf"(?<![A-Za-z0-9.])(\$|€|£)?(\d+(?:[.,]\d+)?)\s?({_UNITS})(?![A-Za-z])", re.IGNORECASE
)
# Chinese has no spaces: a surname is one character before its title, a place name the two
# before its suffix (most are; longer ones are cut, shorter ones take a character too many).
_CJK_TITLED = re.compile(
    r"[\u4e00-\u9fff](?:老师|先生|女士|小姐|医生|教授|经理|阿姨|叔叔)"
    r"|[\u4e00-\u9fff]{2}(?:市|省|县|大学|公司|医院)"
)
_MONEY = re.compile(r"(?<![\w.])[$€£]\d+(?:[.,]\d+)?")
# What ends a sentence, or starts a new one after it: a colon or semicolon too ("Maria: For
# me…", a speaker's label, a list).
_SENTENCE_END = re.compile(r"[.!?:;。！？：；][\s\"'“‘(]*$")
_APOSTROPHES = re.compile(r"['’]")


@dataclass(frozen=True, slots=True)
class Entity:
    text: str  # as written
    key: str  # normalised: what two mentions of one entity share


def _key(text: str) -> str:
    return " ".join(text.casefold().replace("’", "'").split()).strip(".'-")


def _capitalised(text: str) -> list[str]:
    """Runs of capitalised words; a joiner ("of") only inside a run. A run is one name only
    while nothing but spaces separates its words: "Yep, John! Keep going" names "John", not
    "Yep John Keep"."""
    found: list[str] = []
    run: list[str] = []
    end = 0  # where the previous word ended
    for match in _WORD.finditer(text):
        word = match.group().rstrip(".")
        gap = text[end : match.start()]
        end = match.end()
        if run and gap.strip():  # punctuation between two words ends a name
            found.append(" ".join(run))
            run = []
        before = text[: match.start()]
        starts = not before.strip() or bool(_SENTENCE_END.search(before))
        if word[:1].isupper() and not _common(word, starts):
            run.append(word)
            continue
        if run and word.casefold() in _JOINERS and _next_is_capital(text, match.end()):
            run.append(word)
            continue
        if run:
            found.append(" ".join(run))
            run = []
    if run:
        found.append(" ".join(run))
    return [name.removesuffix("'s").removesuffix("’s") for name in found]


def _common(word: str, starts_sentence: bool) -> bool:
    """A capitalised word that names nothing: "I" and its contractions ("I'm", "I've")
    anywhere; a common word ("When", "They're") at the start of a sentence."""
    base = _APOSTROPHES.split(word, maxsplit=1)[0]
    if base == "I":
        return True
    return starts_sentence and base.casefold() in _COMMON


def _next_is_capital(text: str, end: int) -> bool:
    rest = text[end:].lstrip()
    return bool(rest) and rest[0].isupper()


def extract(text: str) -> list[Entity]:
    """The entities named in `text`, first mention first, each key once."""
    head = text[:MAX_CHARS]
    candidates: list[str] = []
    for match in _QUOTED.finditer(head):
        candidates.append(next(g for g in match.groups() if g))
    candidates += _capitalised(head)
    for match in _NUMBER_UNIT.finditer(head):
        currency, number, unit = match.groups()
        candidates.append(f"{currency or ''}{number} {unit}".strip())
    candidates += [match.group(0) for match in _MONEY.finditer(head)]
    candidates += [match.group(0) for match in _CJK_TITLED.finditer(head)]
    out: dict[str, Entity] = {}
    for raw in candidates:
        key = _key(raw)
        if len(key) >= 2 and key not in _COMMON and key not in out:
            out[key] = Entity(raw.strip(), key)
    return list(out.values())[:MAX_ENTITIES]
