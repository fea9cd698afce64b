"""Long-term memories that can be counted per turn and per event.

`CountingExtractor` answers Mem0's extraction call like the fake's default (one memory per
user text) but appends a per-call counter, `<text> #<n>`, as a real LLM never answers twice
byte for byte: Mem0's own hash dedup cannot hide a second write of the same turn, and
`per_turn` counts memories by the turn text they came from.

The admin listing shows a memory's text, not its metadata; `tagged_memories` reads the point
payloads (with the `event_id` Mem0 was given) straight from the vector engine: the proxy's own
(in-process tests) or one opened on a data directory once the server that owned its shards has
stopped (`stored_engine`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memory_bridge.sources.longterm.config import MODEL_PREFIX, namespace
from memory_bridge.sources.longterm.points import MEMORY_KIND
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.index import VectorEngine, Where
from tests.fakes.upstream import Scenario


class CountingExtractor:
    """A `FakeUpstream.memory_responder`: one memory per user text, `<text> #<call>`.

    `delay` slows every answer (work is pending for longer); `fail_first` answers the first
    calls with a 500; `on_call(n)` runs at each call (in the fake's thread) before answering.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.fail_first = 0
        self.on_call: Callable[[int], None] | None = None
        self._calls = itertools.count(1)
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, user_texts: list[str]) -> Scenario:
        with self._lock:
            n = self.calls = next(self._calls)
        if self.on_call is not None:
            self.on_call(n)
        if n <= self.fail_first:
            return Scenario(status=500, delay=self.delay)
        found = [
            {"id": str(i), "text": f"{text.strip()} #{n}", "attributed_to": "user"}
            for i, text in enumerate(user_texts)
            if text.strip()
        ]
        return Scenario(content=json.dumps({"memory": found}), delay=self.delay)


def per_turn(texts: Iterable[str]) -> Counter[str]:
    """Memories per turn: `<turn text> #<call>` counted by the turn text."""
    return Counter(text.rsplit(" #", 1)[0] for text in texts)


@dataclass(frozen=True, slots=True)
class TaggedMemory:
    event_id: str  # "" when the memory carries no tag
    text: str
    namespace: str


def tagged_memories(engine: VectorEngine, token_id: int) -> list[TaggedMemory]:
    """Every memory of the token, in every embedding space it used (entity stores aside)."""
    out: list[TaggedMemory] = []
    for key in engine.shards(token_id):
        if not key.model_id.startswith(MODEL_PREFIX):
            continue
        index = engine.index(key.token_id, key.model_id, key.dims)
        for point in index.scroll(Where(kind=MEMORY_KIND)):
            out.append(
                TaggedMemory(
                    event_id=point.payload.event_id or "",
                    text=point.payload.text,
                    namespace=namespace(token_id, point.payload.user),
                )
            )
    return out


@contextlib.contextmanager
def stored_engine(data_dir: Path) -> Iterator[VectorEngine]:
    """The embedded engine of a stopped server's data directory."""
    engine = EdgeEngine(data_dir)
    try:
        yield engine
    finally:
        engine.close()
