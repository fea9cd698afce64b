"""Curated memory: the operator-maintained MEMORY.md and USER.md, on every request.

A snapshot is read once at the start of each request, so an edit made while a request is in
flight affects the next request only. Curated memory never talks to the Memory Gateway.
"""

from __future__ import annotations

from memory_bridge.core.turn import Turn
from memory_bridge.events.curated import CuratedRepository, CuratedSnapshot
from memory_bridge.sources.base import Exchange, OnRecallFailure, Recall
from memory_bridge.tenancy.config import TokenConfig

CURATED_HEADER = (
    "## Curated memory\n"
    "Maintained by the operator of this assistant; treat it as established background."
)


class CuratedMemory:
    name = "curated"
    on_recall_failure = OnRecallFailure.INTERNAL_ERROR

    def __init__(self, repo: CuratedRepository) -> None:
        self._repo = repo

    async def recall(self, turn: Turn) -> Recall:
        snapshot = await self._repo.snapshot(turn.scope.token_id, turn.scope.user)
        block = render(snapshot)
        return Recall(source=self.name, system_blocks=(block,) if block else ())

    def consumes(self, config: TokenConfig) -> bool:
        return False  # curated documents change only through the admin API, never from chat

    async def remember(self, exchange: Exchange) -> None:
        """Never called: `consumes` is always False."""

    async def purge(self, token_id: int) -> None:
        await self._repo.purge(token_id)

    def describe(self, config: TokenConfig) -> str:
        return "on (MEMORY.md / USER.md, edited through the admin API)"


def render(snapshot: CuratedSnapshot) -> str:
    parts = []
    if snapshot.memory.strip():
        parts.append(f"### MEMORY.md\n{snapshot.memory.strip()}")
    if snapshot.user.strip():
        parts.append(f"### USER.md (about the user)\n{snapshot.user.strip()}")
    if not parts:
        return ""
    return "\n\n".join([CURATED_HEADER, *parts])
