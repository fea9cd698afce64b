"""The shape every memory layer shares, and what it hands to the assembler.

The chat handler never knows which sources exist: it asks each to recall, gives the results to
the assembler, and gives the finished exchange to each to remember. What happens when a source
fails is declared here, by the source, and enforced in one place (`context.recall`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from memory_bridge.core.candidates import Candidate
from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Reply, Turn
from memory_bridge.tenancy.config import TokenConfig


class OnRecallFailure(enum.Enum):
    INTERNAL_ERROR = "internal_error"  # local state that must work: the request fails (500)
    MEMORY_UNAVAILABLE = "memory_unavailable"  # a hard dependency: the request fails (502)
    BEST_EFFORT = "best_effort"  # the request goes on without this source


@dataclass(frozen=True, slots=True)
class Recall:
    """What one source contributes to a request. Every field is optional."""

    source: str
    memories: tuple[str, ...] = ()  # items for the template's {memories} block
    # When each of `memories` was said or learned (epoch seconds; None: unknown), in the same
    # order; empty when the source dates none of them. The forge fills it from candidates.
    dates: tuple[float | None, ...] = ()
    system_blocks: tuple[str, ...] = ()  # labelled blocks appended to the system prompt
    reference: Message | None = None  # an ephemeral message placed before history
    history: tuple[Message, ...] = ()  # stored conversation, oldest first
    stored_prefix: int = 0  # leading request messages (system excluded) already stored
    # How many items the source injected, when one block or message holds several (the
    # Gateway's one reference message lists every hit); None: one per memory, message, block.
    items: int | None = None
    failed: bool = False  # a best-effort source that could not recall; the request went on
    # Ranked items for the Context Forge (with scores and lineage); a source that gives
    # plain `memories` instead is taken as one list in its own order.
    candidates: tuple[Candidate, ...] = ()

    @property
    def injected(self) -> str:
        """This layer's part of `X-MemoryBridge-Injected`: its item count, or `error`."""
        if self.failed:
            return "error"
        if self.items is not None:
            return str(self.items)
        count = (
            len(self.memories)
            + len(self.history)
            + len(self.system_blocks)
            + (1 if self.reference is not None else 0)
        )
        return str(count)


class JobStep(Protocol):
    """A durable job's progress marker: `step(name)` is committed before it returns."""

    async def step(self, name: str) -> None: ...


class PermanentFailure(Exception):
    """After-turn work that failed for good (retrying cannot help): the job ends `failed`."""


class OutcomeUnknown(Exception):
    """After-turn work whose side effect may or may not have happened and must not be
    repeated automatically: the job ends `unknown`, for an operator to look at."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """A turn that completed normally: what was new in the request, and the reply.

    Built from the turn's `session.appended` event when a job runs: `event_id` tags what the
    work writes (so a retry can find an earlier attempt's writes), `attempt` counts from 1,
    `resumed_step` is the last step an earlier attempt recorded through `progress`.
    """

    turn: Turn
    new_messages: tuple[Message, ...]  # conversation messages not stored before (no system)
    reply: Reply
    event_id: str = ""
    attempt: int = 1
    resumed_step: str | None = None
    progress: JobStep | None = None
    recorded_at: float | None = None  # when the turn's event was appended (epoch seconds)
    # A fact stated explicitly (`memory.added`): stored as it is, no extraction.
    explicit: bool = False

    @property
    def user_texts(self) -> tuple[str, ...]:
        return tuple(t for m in self.new_messages if m.role == "user" and (t := m.text().strip()))


class MemorySource(Protocol):
    name: str
    on_recall_failure: OnRecallFailure

    async def recall(self, turn: Turn) -> Recall: ...

    def consumes(self, config: TokenConfig) -> bool:
        """Whether a completed turn of this token gives this source after-turn work (a job)."""
        ...

    async def remember(self, exchange: Exchange) -> None:
        """The after-turn work, run by a queue worker (at least once: see `Exchange`)."""
        ...

    async def purge(self, token_id: int) -> None: ...

    def describe(self, config: TokenConfig) -> str:
        """A one-line state of this layer for a token, shown in admin details."""
        ...
