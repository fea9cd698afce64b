"""Entities by rules, English and Chinese: names (one word or several, with "of" inside),
quoted titles, numbers with units, Chinese names marked by a title or a place suffix; a
sentence's capitalised first word is not a name; keys meet across spellings."""

from __future__ import annotations

import pytest

from memory_bridge.core.entities import MAX_ENTITIES, extract


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("When did Caroline go to the LGBTQ support group?", ["caroline", "lgbtq"]),
        ("Melanie: I ran 5 km with my sister in New York!", ["melanie", "new york", "5 km"]),
        ('My favourite book is "Becoming" by Michelle Obama.', ["becoming", "michelle obama"]),
        ("I work at the Bank of America in San Francisco.", ["bank of america", "san francisco"]),
        ("Hello! I am fine. The weather in Paris is nice.", ["paris"]),
        ("It cost $20 and took 3 years", ["3 years", "$20"]),
        ("We adopted Max’s puppy", ["max"]),
        ("我上周和王老师去了杭州市，读了《三体》。", ["三体", "王老师", "杭州市"]),
        ("她今年30岁", ["30 岁"]),
        ("what a lovely day", []),
        # A name ends at punctuation; a colon starts a sentence; "I" and its contractions
        # are never names.
        ("Maria: Yep, John! We'll go.", ["maria", "john"]),
        ("Nate: I'm drawn to turtles. They're unique, I've heard.", ["nate"]),
        ("Thanks, Mel; Caroline, Jon and Gina came.", ["mel", "caroline", "jon", "gina"]),
        ("", []),
    ],
)
def test_rules_find_the_named_things(text: str, keys: list[str]) -> None:
    assert [e.key for e in extract(text)] == keys


def test_a_question_and_a_memory_share_keys_across_spellings() -> None:
    memory = {e.key for e in extract("Caroline moved to New York in 2021.")}
    question = {e.key for e in extract("Where in new York did CAROLINE live? Ask caroline.")}
    assert {"caroline"} <= memory & question
    assert "new york" in memory


def test_each_key_once_and_the_count_bounded() -> None:
    names = " ".join(f"Person{i} met Person{i}." for i in range(100))
    found = extract(names)
    assert len(found) == MAX_ENTITIES
    assert len({e.key for e in found}) == len(found)
