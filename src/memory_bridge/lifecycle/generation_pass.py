"""The part every layer's rebuild shares: replay the log page by page into the target shard,
checkpointing after each page, then switch the layer's active shard over in one update.

A layer gives how to replay one page (`ReplayPage`: the events after an id, at most so many;
it answers the last event id read and how many items it counted) and how many items there are
in all (for progress). The checkpoint row is the layer's `vector_generations` row, so a job that
is retried, or resumed on another worker, carries on where the last page ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from memory_bridge.sources.base import JobStep
from memory_bridge.sources.vector_generations import Generation, record_progress
from memory_bridge.sources.vector_generations import switch as switch_rows
from memory_bridge.storage.db import Database

# (after event id, at most this many or None for all) -> (last event id read or None, items)
ReplayPage = Callable[[int, int | None], Awaitable[tuple[int | None, int]]]


@dataclass(frozen=True, slots=True)
class Switched:
    before: Generation  # the row before the switch: its active shard is the one to drop
    checkpoint: int  # the last event replayed before the switch
    done: int


async def replay_and_switch(
    db: Database,
    progress: JobStep,
    *,
    row: Generation,
    layer: str,
    total: int,
    page_size: int | None,
    replay: ReplayPage,
) -> Switched | None:
    """None when a newer rebuild superseded this one (it takes over) or the switch found the
    row changed; else what the caller needs to finish (catch-up, drop of the old shard)."""
    assert row.event_id is not None
    event_id = row.event_id
    checkpoint, done = row.checkpoint, row.done
    while True:
        last, counted = await replay(checkpoint, page_size)
        if last is None:
            break
        done += counted
        checkpoint = last
        await progress.step("rebuild")  # renews the lease; raises when it is lost
        ok = await db.write(
            partial(
                record_progress,
                token_id=row.token_id,
                layer=layer,
                event_id=event_id,
                checkpoint=checkpoint,
                done=done,
                total=max(total, done),
            )
        )
        if not ok:
            return None
    before = await db.write(lambda c: switch_rows(c, row.token_id, layer, event_id))
    if before is None:
        return None
    return Switched(before, checkpoint, done)
