"""The relational fetch (design, Stage 1.3): the entities a question names seed a walk over
the entities and the memories that mention them, to depth 2.

The entity index is the entity keys stored with each episodic point (`PointPayload.entities`,
written by the queue's episodic job), so it is rebuilt, re-embedded and erased with the
episodic layer and is always one end user's: every lookup filters on the user. Depth 1: the
memories naming a question's entity. Depth 2: the memories naming an entity those memories
name beside it (co-mention), the most co-mentioned first. An entity named by more than `HUB`
of the user's memories (the user's own name, a speaker) tells nothing about any one of them
and is not followed, as a search engine skips stop words.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from memory_bridge.vectors.index import StoredPoint, VectorIndex, Where

__all__ = ["HUB", "GraphHit", "traverse"]

HUB = 40
NEIGHBOURS = 4  # co-mentioned entities followed to depth 2
LIMIT = 20  # memories handed on, depth 1 first


@dataclass(frozen=True, slots=True)
class GraphHit:
    point: StoredPoint
    depth: int  # 1: names a question's entity; 2: names an entity co-mentioned with one
    via: str  # the entity key that reached it
    rank: int  # 1-based, depth 1 first


def _mentions(index: VectorIndex, user: str, kind: str, key: str) -> list[StoredPoint] | None:
    """The user's memories naming `key`; None when it is a hub."""
    where = Where(user=user, kind=kind, entities=key)
    points = list(itertools.islice(index.scroll(where, batch=HUB + 1), HUB + 1))
    return None if len(points) > HUB else points


def traverse(index: VectorIndex, user: str, kind: str, seeds: Sequence[str]) -> list[GraphHit]:
    """Memories reached from the seed entity keys, depth 1 then 2, at most `LIMIT`."""
    found: dict[str, tuple[StoredPoint, int, str, int]] = {}  # id -> point, depth, via, hits
    for key in dict.fromkeys(seeds):
        for point in _mentions(index, user, kind, key) or ():
            previous = found.get(point.id)
            hits = 1 if previous is None else previous[3] + 1
            via = key if previous is None else previous[2]
            found[point.id] = (point, 1, via, hits)
    seeds_set = set(seeds)
    co_mentioned = Counter(
        e for point, *_ in found.values() for e in point.payload.entities if e not in seeds_set
    )
    for key, _ in co_mentioned.most_common(NEIGHBOURS):
        for point in _mentions(index, user, kind, key) or ():
            if point.id not in found:
                found[point.id] = (point, 2, key, 0)
    # Depth first; at depth 1 the memories naming more of the question's entities, then the
    # newest.
    ordered = sorted(found.values(), key=lambda f: (f[1], -f[3], -f[0].payload.created_at, f[0].id))
    return [
        GraphHit(point, depth, via, rank)
        for rank, (point, depth, via, _) in enumerate(ordered[:LIMIT], 1)
    ]
