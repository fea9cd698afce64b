"""Long-term memories that can be counted per turn and per event.

`CountingExtractor` answers Mem0's extraction call like the fake's default (one memory per
user text) but appends a per-call counter, `<text> #<n>`, as a real LLM never answers twice
byte for byte: Mem0's own hash dedup cannot hide a second write of the same turn, and
`per_turn` counts memories by the turn text they came from.

The admin listing shows a memory's text, not its metadata; `tagged_memories` reads the point
payloads (with the `event_id` Mem0 was given) straight from a Qdrant client: the proxy's own
(in-process tests) or one opened on a data directory's local storage once the server that
owned it has stopped (`local_storage`).
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

from qdrant_client import QdrantClient

from memory_bridge.sources import mem0_config
from memory_bridge.sources.longterm import EVENT_ID_KEY
from memory_bridge.sources.qdrant_store import collection_names, open_client
from tests.fakes.upstream import Scenario

_PAGE = 256


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


def tagged_memories(client: QdrantClient, token_id: int) -> list[TaggedMemory]:
    """Every memory of the token, in every embedding space it used (entity stores aside)."""
    names = mem0_config.token_collections(token_id, collection_names(client))
    out: list[TaggedMemory] = []
    for name in names:
        if name.endswith("_entities"):
            continue
        offset = None
        while True:
            batch, offset = client.scroll(
                name, limit=_PAGE, offset=offset, with_payload=True, with_vectors=False
            )
            for point in batch:
                payload = point.payload or {}
                out.append(
                    TaggedMemory(
                        event_id=str(payload.get(EVENT_ID_KEY) or ""),
                        text=str(payload.get("data") or ""),
                        namespace=str(payload.get("user_id") or ""),
                    )
                )
            if offset is None:
                break
    return out


@contextlib.contextmanager
def local_storage(qdrant_path: Path) -> Iterator[QdrantClient]:
    """The local-mode storage of a stopped server (its write-ahead log replayed)."""
    client = open_client(qdrant_path, "", "")
    try:
        yield client
    finally:
        client.close()
