"""Context windows for the recall bench's indexing variants (`+before=N`, `+after=N`,
`+across=true`, `+own=N`, `+decay=true`): what a message's BM25 side is indexed with, measured
before the product indexes that way (`sources/episodic_context.py`).

A window variant indexes a message with the `before` messages before it and the `after`
messages after it, in its exchange only or (`across`) anywhere in its session, and its own text
`own` times (`decay`: a neighbour at distance d counted (widest - d + 1) times). The bench knows
every session in advance and computes the windows from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory_bridge.sources.base import Exchange
from memory_bridge.sources.episodic import EpisodicMemory
from memory_bridge.vectors.index import VectorIndex, VectorPoint


@dataclass(frozen=True, slots=True)
class Window:
    before: int = 1
    after: int = 0
    across: bool = False  # reach into the session's other exchanges
    own: int = 1  # times the message's own text is indexed (its terms weigh more than context)
    decay: bool = False  # a neighbour at distance d counted (widest - d + 1) times

    def contexts(self, exchanges: Sequence[Sequence[str]]) -> list[list[str]]:
        """The text in context of every message of a session's exchanges, by exchange."""
        flat = [(e, text) for e, texts in enumerate(exchanges) for text in texts]
        out: list[list[str]] = [[] for _ in exchanges]
        for i, (e, text) in enumerate(flat):
            lo, hi = max(0, i - self.before), min(len(flat), i + self.after + 1)
            window = [
                "\n".join([t] * self._times(i, j))
                for j, (f, t) in enumerate(flat[lo:hi], lo)
                if self.across or f == e
            ]
            out[e].append("\n".join(window) if window else text)
        return out

    def _times(self, at: int, j: int) -> int:
        if j == at:
            return self.own
        return max(self.before, self.after) - abs(j - at) + 1 if self.decay else 1


class WindowedMemory(EpisodicMemory):
    """`EpisodicMemory` whose texts in context come from the bench's windows (by event id)."""

    def __init__(self, *args: object, window: Window, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.window = window
        self.in_context: dict[str, list[str]] = {}

    def contexts(
        self,
        index: VectorIndex | None,
        exchanges: Sequence[Exchange],
        texts: Sequence[list[str]],
        created: Sequence[float],
    ) -> tuple[list[list[str]], list[VectorPoint]]:
        out = []
        for exchange, plain in zip(exchanges, texts, strict=True):
            found = self.in_context.get(exchange.event_id)
            if found is None or len(found) != len(plain):
                raise RuntimeError(f"no window for {exchange.event_id}")
            out.append(found)
        return out, []
