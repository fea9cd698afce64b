"""The payload of one imported event, validated and normalised by its type (`payload_of`), with
the API's bounds (`ImportBounds`) and the field checks every line shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memory_bridge.core.candidates import importance_of
from memory_bridge.core.message_bounds import bounded, truncate
from memory_bridge.core.messages import Message
from memory_bridge.events.model import EventType
from memory_bridge.settings import Settings
from memory_bridge.storage.sessions import stored_form

MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_LABEL = 200  # an end user or session id, as on the chat path
MAX_ID = 64
_KINDS = ("memory", "user")


class TooLarge(ValueError):
    """A value over one of the API's size bounds: the import is refused with 413."""


@dataclass(frozen=True, slots=True)
class ImportBounds:
    """The API's bounds an import obeys (the install's settings)."""

    curated_max_bytes: int
    max_stored_message_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> ImportBounds:
        return cls(settings.curated_max_bytes, settings.max_stored_message_bytes)


# The turns one imported session summary may cover, at most.
MAX_COVERED = 10_000
# The payload keys of consolidation events that name another fact (mapped like `memory_id`).
LINKED_IDS: dict[str, tuple[str, ...]] = {
    EventType.LONGTERM_MERGED: ("into_id",),
    EventType.LONGTERM_SUPERSEDED: ("by_id",),
}


def payload_of(kind: str, data: dict[str, Any], bounds: ImportBounds) -> dict[str, Any]:
    user = _label(data, "user")
    limit = bounds.max_stored_message_bytes
    if kind.startswith("session."):
        out: dict[str, Any] = {"user": user, "session": _label(data, "session")}
        if kind == EventType.SESSION_APPENDED:
            messages = data["messages"]
            if not isinstance(messages, list):
                raise ValueError("'messages' must be a list")
            out["messages"] = [
                stored_form(bounded(Message.model_validate(m), limit)) for m in messages
            ]
            out["query"] = truncate(string(data, "query", MAX_LINE_BYTES, default=""), limit)
            finish = data.get("finish_reason")
            out["finish_reason"] = None if finish is None else string(data, "finish_reason", 40)
        if kind == EventType.SESSION_SUMMARISED:
            out["text"] = string(data, "text", MAX_LINE_BYTES)
            covers = data["covers"]
            if not isinstance(covers, list) or len(covers) > MAX_COVERED:
                raise ValueError(f"'covers' must be a list of at most {MAX_COVERED} event ids")
            out["covers"] = [string({"id": c}, "id", MAX_ID, empty=False) for c in covers]
            out["last_at"] = time_of(data["last_at"]).isoformat()
            if data.get("importance") is not None:  # absent in older exports: the default
                out["importance"] = importance_of(data["importance"])
                if out["importance"] is None:
                    raise ValueError("'importance' must be a number from 0 to 1")
        return out
    if kind.startswith("curated."):
        doc = data["kind"]
        if doc not in _KINDS:
            raise ValueError("'kind' must be 'memory' or 'user'")
        if doc == "memory" and user:
            raise ValueError("MEMORY.md is token-wide: its 'user' must be empty")
        out = {"kind": doc, "user": user}
        if kind == EventType.CURATED_REPLACED:
            out["body"] = body = string(data, "body", MAX_LINE_BYTES)
            if len(body.encode("utf-8")) > bounds.curated_max_bytes:
                raise TooLarge(
                    f"curated documents are limited to {bounds.curated_max_bytes} bytes "
                    "(CURATED_MAX_BYTES)"
                )
        return out
    # longterm.*
    out = {
        "user": user,
        "memory_id": string(data, "memory_id", MAX_ID, empty=False),
        "source_event_id": _optional_id(data, "source_event_id"),
    }
    if kind == EventType.LONGTERM_DELETED:
        out["reason"] = string(data, "reason", MAX_LABEL, default="")
    else:
        out["text"] = truncate(string(data, "text", MAX_LINE_BYTES), limit)
    # Consolidation: the fact this one was merged into, or the one that superseded it.
    for key in LINKED_IDS.get(kind, ()):
        out[key] = string(data, key, MAX_ID, empty=False)
    if kind == EventType.LONGTERM_SUPERSEDED:
        out["by_text"] = truncate(string(data, "by_text", MAX_LINE_BYTES), limit)
    return out


def meta_of(meta: dict[str, Any]) -> dict[str, Any]:
    # Only what the log's own meta holds; anything else an export carries is dropped.
    kept: dict[str, Any] = {}
    request_id = meta.get("request_id")
    if isinstance(request_id, str) and len(request_id) <= MAX_ID:
        kept["request_id"] = request_id
    if meta.get("backfilled") is True:
        kept["backfilled"] = True
    return kept


def time_of(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError("'created_at' must be an ISO 8601 time")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("'created_at' must be an ISO 8601 time") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)


def _label(data: dict[str, Any], name: str) -> str:
    text = string(data, name, MAX_LABEL)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError(f"{name!r} holds a control character")
    return text


def _optional_id(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    return string(data, name, MAX_ID, empty=False)


def string(
    data: dict[str, Any],
    name: str,
    limit: int,
    *,
    empty: bool = True,
    default: str | None = None,
) -> str:
    value = data.get(name, default) if default is not None else data[name]
    if not isinstance(value, str):
        raise ValueError(f"{name!r} must be a string")
    if len(value) > limit or (not empty and not value):
        raise ValueError(
            f"{name!r} must be 1 to {limit} characters" if not empty else f"{name!r} is too long"
        )
    return value
