"""Session history: the recent conversation of this (token, user, session).

Clients differ: some send only the newest message and rely on the proxy for context, others
resend the whole conversation every time. The stored tail is matched against the request so
that neither injection nor storage duplicates what the request already carries. What is
stored is bounded (`message_bounds`), and what is injected is bounded by a token budget as
well as by count, so one huge old message is never re-sent forever.
"""

from __future__ import annotations

import logging

from memory_bridge.message_bounds import bounded
from memory_bridge.messages import Message, conversation
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.storage.sessions import SessionRepository, StoredMessage
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.turn import Turn

log = logging.getLogger(__name__)


class SessionHistory:
    name = "history"
    on_recall_failure = OnRecallFailure.INTERNAL_ERROR

    def __init__(self, repo: SessionRepository, max_message_bytes: int, token_budget: int) -> None:
        self._repo = repo
        self._max_bytes = max_message_bytes
        self._budget = token_budget

    async def recall(self, turn: Turn) -> Recall:
        stored = await self._repo.window(turn.scope, turn.config.session_window_size)
        if not stored:
            return Recall(source=self.name)
        # The request's messages as they would have been stored, so a resent huge message
        # matches its truncated stored copy.
        request = [bounded(m, self._max_bytes).identity() for m in conversation(turn.messages)]
        carried, prefix = overlap([s.identity for s in stored], request)
        injected = within_budget(stored[: len(stored) - carried], self._budget)
        return Recall(source=self.name, history=injected, stored_prefix=prefix)

    def consumes(self, config: TokenConfig) -> bool:
        # Stored in the turn's own transaction: session history is a projection of the log.
        return False

    async def remember(self, exchange: Exchange) -> None:
        """Never called: `consumes` is always False."""

    async def purge(self, token_id: int) -> None:
        await self._repo.purge(token_id)

    def describe(self, config: TokenConfig) -> str:
        return f"on (last {config.session_window_size} messages, at most {self._budget} tokens)"


def within_budget(window: list[StoredMessage], budget: int) -> tuple[Message, ...]:
    """The newest messages of `window` whose tokens fit in `budget`, oldest first.

    A cut never leaves a tool result without the assistant message that called it: the
    upstream would refuse the orphan.
    """
    spent = 0
    start = len(window)
    while start > 0 and spent + window[start - 1].tokens <= budget:
        start -= 1
        spent += window[start].tokens
    while start < len(window) and window[start].message.role == "tool":
        start += 1
    return tuple(s.message for s in window[start:])


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
