"""A completed turn as the memory sources see it, rebuilt from the event that records it
(the job worker's consumers and the rebuilds replay the log through this)."""

from __future__ import annotations

from memory_bridge.core.messages import Message
from memory_bridge.core.turn import Reply, Scope, Turn
from memory_bridge.events.model import StoredEvent
from memory_bridge.events.queue import Job
from memory_bridge.sources.base import Exchange, JobStep
from memory_bridge.tenancy.config import TokenConfig


def rebuild_exchange(
    event: StoredEvent, config: TokenConfig, job: Job, progress: JobStep
) -> Exchange:
    """The completed turn a `session.appended` event records: its new messages, then the
    reply as the last stored message (when the turn had one). A `memory.added` event has
    the same shape: one user message, no reply, `explicit`."""
    data = event.payload
    scope = Scope(token_id=event.token_id, user=data["user"], session=data["session"])
    stored = [Message.model_validate(m) for m in data["messages"]]
    last = stored[-1] if stored and stored[-1].role == "assistant" else None
    new_messages = tuple(stored[:-1] if last is not None else stored)
    reply = Reply(
        content=last.content if last is not None and isinstance(last.content, str) else None,
        tool_calls=tuple(last.tool_calls or ()) if last is not None else (),
        finish_reason=data.get("finish_reason"),
    )
    turn = Turn(
        request_id=str(event.meta.get("request_id", "")),
        scope=scope,
        config=config,
        messages=new_messages,
        query=str(data.get("query", "")),
    )
    return Exchange(
        turn=turn,
        new_messages=new_messages,
        reply=reply,
        event_id=event.event_id,
        attempt=job.attempts,
        resumed_step=job.step,
        progress=progress,
        recorded_at=event.created_at.timestamp(),
        explicit=data.get("explicit") is True,
    )
