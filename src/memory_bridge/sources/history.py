"""Session history: the recent conversation of this (token, user, session).

Clients differ: some send only the newest message and rely on the proxy for context, others
resend the whole conversation every time. The stored tail is matched against the request so
that neither injection nor storage duplicates what the request already carries.
"""

from __future__ import annotations

from memory_bridge.messages import conversation
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.storage.sessions import SessionRepository
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.turn import Turn


class SessionHistory:
    name = "history"
    on_recall_failure = OnRecallFailure.INTERNAL_ERROR
    remember_inline = True

    def __init__(self, repo: SessionRepository) -> None:
        self._repo = repo

    async def recall(self, turn: Turn) -> Recall:
        stored = await self._repo.window(turn.scope, turn.config.session_window_size)
        if not stored:
            return Recall(source=self.name)
        carried, prefix = overlap(
            [s.identity for s in stored], [m.identity() for m in conversation(turn.messages)]
        )
        return Recall(
            source=self.name,
            history=tuple(s.message for s in stored[: len(stored) - carried]),
            stored_prefix=prefix,
        )

    async def remember(self, exchange: Exchange) -> None:
        reply = exchange.reply
        items = list(exchange.new_messages)
        if reply.content or reply.tool_calls:
            items.append(reply.as_message())
        await self._repo.append(exchange.turn.scope, items)

    async def purge(self, token_id: int) -> None:
        await self._repo.purge(token_id)

    def describe(self, config: TokenConfig) -> str:
        return f"on (last {config.session_window_size} messages)"


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
