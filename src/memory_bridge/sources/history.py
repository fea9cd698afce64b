"""Session history: the recent conversation of this (token, user, session).

Clients differ: some send only the newest message and rely on the proxy for context, others
resend the whole conversation every time. The stored tail is matched against the request so
that neither injection nor storage duplicates what the request already carries. What is
stored is bounded (`message_bounds`), and what is injected is bounded by a token budget as
well as by count, so one huge old message is never re-sent forever.

The window slides in steps, not by one turn at a time: a provider caches a prompt by its exact
prefix, and a window whose first message moves every turn changes the prompt right after the
system prompt every turn. The injected history starts at an anchor message that stays while
the window (at most `session_window_size` messages and the token budget) still holds it; when
it no longer does, the oldest half is dropped at once and the next message becomes the anchor.
The prompt's history is then byte-identical, and only grows, for about half a window of turns.
The anchor is kept per process (a bounded memo): a restart or another process costs one
re-anchoring, never a wrong window.
"""

from __future__ import annotations

import logging

from memory_bridge.core.message_bounds import bounded
from memory_bridge.core.messages import Message, conversation
from memory_bridge.core.turn import Turn
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.storage.sessions import SessionRepository, StoredMessage
from memory_bridge.tenancy.config import TokenConfig

log = logging.getLogger(__name__)
_ANCHOR_MEMO = 10_000  # sessions whose window anchor is remembered (cleared when full)


class SessionHistory:
    name = "history"
    on_recall_failure = OnRecallFailure.INTERNAL_ERROR

    def __init__(self, repo: SessionRepository, max_message_bytes: int, token_budget: int) -> None:
        self._repo = repo
        self._max_bytes = max_message_bytes
        self._budget = token_budget
        # (token, user, session) -> identity of the first injected message.
        self._anchors: dict[tuple[int, str, str], str] = {}

    async def recall(self, turn: Turn) -> Recall:
        size = turn.config.session_window_size
        stored = await self._repo.window(turn.scope, size)
        if not stored:
            return Recall(source=self.name)
        # The request's messages as they would have been stored, so a resent huge message
        # matches its truncated stored copy.
        request = [bounded(m, self._max_bytes).identity() for m in conversation(turn.messages)]
        carried, prefix = overlap([s.identity for s in stored], request)
        scope = turn.scope
        key = (scope.token_id, scope.user, scope.session)
        # Fewer stored messages than the window holds: `stored` is the whole session.
        whole = len(stored) < size
        window = stored[: len(stored) - carried]
        start = stepped_start(window, self._anchors.get(key), whole, size, self._budget)
        if start < len(window):
            if len(self._anchors) >= _ANCHOR_MEMO and key not in self._anchors:
                self._anchors.clear()
            self._anchors[key] = window[start].identity
        injected = tuple(s.message for s in window[start:])
        return Recall(source=self.name, history=injected, stored_prefix=prefix)

    def consumes(self, config: TokenConfig) -> bool:
        # Stored in the turn's own transaction: session history is a projection of the log.
        return False

    async def remember(self, exchange: Exchange) -> None:
        """Never called: `consumes` is always False."""

    async def purge(self, token_id: int) -> None:
        await self._repo.purge(token_id)

    def describe(self, config: TokenConfig) -> str:
        size = config.session_window_size
        return (
            f"on (up to the last {size} messages, sliding {max(1, size // 2)} at a time; "
            f"at most {self._budget} tokens)"
        )


def within_budget(window: list[StoredMessage], budget: int) -> tuple[Message, ...]:
    """The newest messages of `window` whose tokens fit in `budget`, oldest first."""
    return tuple(s.message for s in window[_cut(window, budget, len(window)) :])


def stepped_start(
    window: list[StoredMessage], anchor: str | None, whole: bool, size: int, budget: int
) -> int:
    """Where the injected part of `window` (the newest stored messages, oldest first) starts.

    At the anchor while `window` still holds it and it fits the budget; at the session's first
    message while the session is shorter than the window (`whole`); otherwise re-anchored so
    that half the window (count and tokens) is left to grow into. Never more than `budget`
    tokens, never a tool result without the call before it.
    """
    if anchor is not None:
        for i, stored in enumerate(window):
            if stored.identity == anchor:
                if sum(s.tokens for s in window[i:]) <= budget:
                    return _skip_orphans(window, i)
                break
    if whole and sum(s.tokens for s in window) <= budget:
        return _skip_orphans(window, 0)
    keep = max(1, size // 2)
    start = max(_cut(window, budget // 2, len(window)), len(window) - keep)
    if start >= len(window):  # one message larger than half the budget: the whole budget
        start = _cut(window, budget, len(window))
    return _skip_orphans(window, start)


def _cut(window: list[StoredMessage], budget: int, end: int) -> int:
    """The start of the newest messages of `window[:end]` whose tokens fit in `budget`.

    A cut never leaves a tool result without the assistant message that called it: the
    upstream would refuse the orphan.
    """
    spent = 0
    start = end
    while start > 0 and spent + window[start - 1].tokens <= budget:
        start -= 1
        spent += window[start].tokens
    return _skip_orphans(window, start)


def _skip_orphans(window: list[StoredMessage], start: int) -> int:
    while start < len(window) and window[start].message.role == "tool":
        start += 1
    return start


def overlap(stored: list[str], request: list[str]) -> tuple[int, int]:
    """How much of the stored tail the request already carries, and where it ends.

    Returns `(k, p)`: the last `k` stored messages equal `request[p-k:p]`, with `k` as large as
    possible (then `p` as late as possible). `request[p:]` is what is new. The match must end
    with the newest stored message, an assistant reply, so a client that merely repeats a short
    user message ("ok") in a new turn does not match.
    """
    if not stored or not request:
        return 0, 0
    last = stored[-1]
    best_k, best_p = 0, 0
    for q in range(len(request) - 1, -1, -1):
        if request[q] != last:
            continue
        k = 1
        while k < len(stored) and k <= q and request[q - k] == stored[-1 - k]:
            k += 1
        if k > best_k:
            best_k, best_p = k, q + 1
    return best_k, best_p
