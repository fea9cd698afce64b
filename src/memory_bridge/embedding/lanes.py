"""Single-text forward passes that share a pass instead of queueing for a core.

Concurrent requests each embed their query alone, one text per forward pass. On a machine with
fewer cores than requests in flight, those passes only time-share the cores, and a pass over
one short text uses a core badly (the matrix products are too small): a batch of 4–8 short
texts costs about half as much per text as the same texts one by one (docs/performance.md,
"embed_concurrent.py"). So at most `lanes` single-text passes run at once; a caller that finds
every lane busy waits, and when a lane frees, the next caller takes its own text and the
oldest waiting ones into one pass. A caller alone never waits: with nothing else in flight, a
query runs at once, as before.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt


class Encoder(Protocol):
    def encode(self, texts: list[str]) -> npt.NDArray[np.float32]: ...


@dataclass(slots=True)
class Query:
    """One caller's text; `result` is set once a pass has embedded it (or failed)."""

    text: str
    key: bytes
    result: Future[list[float]] = field(default_factory=Future)
    taken: bool = False  # in a pass (this caller's or another's)


# Called once per query of a pass, before its future is set: its vector, or None if the pass
# failed (the future then carries the exception).
Finished = Callable[[Query, list[float] | None], None]


class Lanes:
    def __init__(self, lanes: int, batch: int) -> None:
        if lanes < 1 or batch < 1:
            raise ValueError("lanes and batch must be at least 1")
        self._lanes = lanes
        self._batch = batch
        self._cond = threading.Condition()
        self._waiting: deque[Query] = deque()
        self._busy = 0

    def run(self, encoder: Encoder, query: Query, finished: Finished) -> None:
        """Embeds `query` in a pass of this thread's, or returns at once if another thread's
        pass took it; either way its future carries the outcome."""
        with self._cond:
            self._waiting.append(query)
            while not query.taken and self._busy >= self._lanes:
                self._cond.wait()
            if query.taken:
                batch: list[Query] = []
            else:
                batch = self._take(query)
                self._busy += 1
        if batch:
            self._pass(encoder, batch, finished)

    def _take(self, own: Query) -> list[Query]:
        """The caller's own text first, then the oldest waiting ones; under the condition."""
        self._waiting.remove(own)
        batch = [own]
        while self._waiting and len(batch) < self._batch:
            batch.append(self._waiting.popleft())
        for query in batch:
            query.taken = True
        return batch

    def _pass(self, encoder: Encoder, batch: list[Query], finished: Finished) -> None:
        try:
            vectors: list[list[float]] = encoder.encode([q.text for q in batch]).tolist()
        except BaseException as exc:
            for query in batch:
                finished(query, None)
                query.result.set_exception(exc)
        else:
            for query, vector in zip(batch, vectors, strict=True):
                finished(query, vector)
                query.result.set_result(vector)
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()
