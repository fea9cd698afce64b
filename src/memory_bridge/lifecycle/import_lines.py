"""Reading an import: NDJSON lines validated one by one and staged in a private file.

Nothing of an import reaches the database before every line of it is read and found valid: a
bad line refuses the whole import (422 naming the line) and the staged file is deleted. An
import obeys the bounds of the API (`ImportBounds`): a curated document larger than
`CURATED_MAX_BYTES` refuses it (413, as the admin PUT answers), and stored messages, the memory
query and long-term fact texts are cut to `MAX_STORED_MESSAGE_BYTES` with the chat path's
visible marker, as a chat turn's are; a turn's messages are bounded by its line, which is
shorter than the largest chat request. The
body is split into lines as it arrives, each line bounded (`MAX_LINE_BYTES`), and parsed and
written off the event loop a batch at a time, so neither the body nor a line is ever held
whole beyond its bound.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.message_bounds import bounded, truncate
from memory_bridge.core.messages import Message
from memory_bridge.events.model import EventType
from memory_bridge.lifecycle.transfer import CLASS_OF, FORMAT, VERSION
from memory_bridge.settings import Settings
from memory_bridge.storage.sessions import stored_form
from memory_bridge.tenancy.private_files import private_dir

MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_LABEL = 200  # an end user or session id, as on the chat path
MAX_ID = 64
_BATCH_BYTES = 1024 * 1024
_KINDS = ("memory", "user")


class ImportRefused(ProxyError):
    def __init__(self, line: int, reason: str, status: int = 422) -> None:
        super().__init__(status, "invalid_request_error", f"Line {line}: {reason}")
        self.line = line


class _TooLarge(ValueError):
    """A value over one of the API's size bounds: the import is refused with 413."""


@dataclass(frozen=True, slots=True)
class ImportBounds:
    """The API's bounds an import obeys (the install's settings)."""

    curated_max_bytes: int
    max_stored_message_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> ImportBounds:
        return cls(settings.curated_max_bytes, settings.max_stored_message_bytes)


@dataclass(frozen=True, slots=True)
class ImportEvent:
    """One valid event line, normalised. `origin` is the event's identity across installs:
    the id it was first appended with (an event imported before keeps its origin)."""

    origin: str
    type: str
    payload: dict[str, Any]
    meta: dict[str, Any]
    embed_model: str | None
    created_at: datetime
    # The id the line carries (the exporter's event id): a summary's `covers` name turns by it.
    line_id: str | None = None

    def dump(self) -> str:
        return json.dumps(
            {
                "origin": self.origin,
                "type": self.type,
                "payload": self.payload,
                "meta": self.meta,
                "embed_model": self.embed_model,
                "created_at": self.created_at.isoformat(),
                "line_id": self.line_id,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def load(cls, line: str) -> ImportEvent:
        data = json.loads(line)
        return cls(
            origin=data["origin"],
            type=data["type"],
            payload=data["payload"],
            meta=data["meta"],
            embed_model=data["embed_model"],
            created_at=datetime.fromisoformat(data["created_at"]),
            line_id=data.get("line_id"),
        )


@dataclass
class Staged:
    """A validated import waiting in its file; `discard()` when done with it.

    The file holds the import's plaintext: it is locked (`flock`) for as long as it is in use,
    so `import_staging.sweep_stale` (at start-up, and by every erasure) removes only what a
    killed import left.
    """

    path: Path
    header: dict[str, Any] = field(default_factory=dict)
    events: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    lock: int | None = None  # a descriptor holding the file's lock until `discard`

    def read(self) -> Iterator[ImportEvent]:
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                yield ImportEvent.load(line)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
        if self.lock is not None:
            lock, self.lock = self.lock, None
            os.close(lock)


async def stage(chunks: AsyncIterator[bytes], directory: Path, bounds: ImportBounds) -> Staged:
    """Read an import body into a staged file, or raise `ImportRefused` (nothing kept)."""
    private_dir(directory)
    path = directory / f"import-{uuid.uuid4().hex}.ndjson"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    # The lock belongs to the open file, which this duplicate keeps open after the writer
    # below is closed.
    staged = Staged(path, lock=os.dup(fd))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            reader = _Lines()
            async for chunk in chunks:
                for batch in reader.feed(chunk):
                    await asyncio.to_thread(_check_batch, batch, staged, out, bounds)
            await asyncio.to_thread(_check_batch, reader.end(), staged, out, bounds)
        if not staged.header:
            raise ImportRefused(1, "the import is empty; its first line must be the header.")
    except BaseException:
        staged.discard()
        raise
    return staged


class _Lines:
    """Splits the body into numbered lines, in batches of about `_BATCH_BYTES`."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._batch: list[tuple[int, bytes]] = []
        self._batch_bytes = 0
        self._number = 0

    def feed(self, chunk: bytes) -> Iterator[list[tuple[int, bytes]]]:
        self._pending += chunk
        start = 0
        while (end := self._pending.find(b"\n", start)) >= 0:
            self._add(bytes(self._pending[start:end]))
            start = end + 1
            if self._batch_bytes >= _BATCH_BYTES:
                yield self._take()
        del self._pending[:start]
        if len(self._pending) > MAX_LINE_BYTES:
            raise ImportRefused(self._number + 1, f"longer than {MAX_LINE_BYTES} bytes.")

    def end(self) -> list[tuple[int, bytes]]:
        if self._pending:
            self._add(bytes(self._pending))
            self._pending.clear()
        return self._take()

    def _add(self, line: bytes) -> None:
        self._number += 1
        if len(line) > MAX_LINE_BYTES:
            raise ImportRefused(self._number, f"longer than {MAX_LINE_BYTES} bytes.")
        self._batch.append((self._number, line))
        self._batch_bytes += len(line)

    def _take(self) -> list[tuple[int, bytes]]:
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        return batch


def _check_batch(
    batch: list[tuple[int, bytes]], staged: Staged, out: Any, bounds: ImportBounds
) -> None:
    for number, raw in batch:
        if not raw.strip():
            continue
        value = _parse(number, raw)
        if not staged.header:
            staged.header = _header(number, value)
            continue
        event = _event(number, value, bounds)
        out.write(event.dump() + "\n")
        staged.events += 1
        name = CLASS_OF[event.type]
        staged.counts[name] = staged.counts.get(name, 0) + 1


def _parse(number: int, raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ImportRefused(number, "nested too deeply.") from None
    except UnicodeDecodeError:
        raise ImportRefused(number, "not valid UTF-8.") from None
    except ValueError:
        raise ImportRefused(number, "not valid JSON.") from None
    if not isinstance(value, dict):
        raise ImportRefused(number, "not a JSON object.")
    _check_strings(number, value)
    return value


def _check_strings(number: int, value: object) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ImportRefused(number, "holds a NUL character.")
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ImportRefused(number, "holds text that is not valid Unicode.") from None
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _header(number: int, value: dict[str, Any]) -> dict[str, Any]:
    if value.get("format") != FORMAT:
        raise ImportRefused(number, f"the first line must be the header (format {FORMAT!r}).")
    version = value.get("version")
    if type(version) is not int or version > VERSION or version < 1:
        raise ImportRefused(
            number, f"export format version {version!r} is not one this install reads."
        )
    return value


def _event(number: int, value: dict[str, Any], bounds: ImportBounds) -> ImportEvent:
    try:
        return _validated(value, bounds)
    except _TooLarge as exc:
        raise ImportRefused(number, f"{exc.args[0]}.", 413) from None
    except (ValueError, TypeError, KeyError, ValidationError) as exc:
        reason = exc.args[0] if isinstance(exc, ValueError | TypeError) and exc.args else ""
        if isinstance(exc, KeyError):
            reason = f"missing field {exc.args[0]!r}"
        elif isinstance(exc, ValidationError):
            reason = "a message is not a valid chat message"
        raise ImportRefused(number, f"{reason or 'not a valid event'}.") from None


def _validated(value: dict[str, Any], bounds: ImportBounds) -> ImportEvent:
    kind = value["type"]
    if kind not in CLASS_OF:
        raise ValueError(f"unknown or not importable event type {str(kind)[:40]!r}")
    event_id = _string(value, "event_id", MAX_ID, empty=False)
    payload = value["payload"]
    if not isinstance(payload, dict):
        raise ValueError("'payload' must be an object")
    meta = value.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError("'meta' must be an object")
    embed_model = value.get("embed_model")
    if embed_model is not None:
        embed_model = _string(value, "embed_model", MAX_LABEL)
    origin = meta.get("origin", event_id)
    if not isinstance(origin, str) or not origin or len(origin) > MAX_ID:
        raise ValueError("'meta.origin' must be an id")
    return ImportEvent(
        origin=origin,
        type=kind,
        payload=_payload(kind, payload, bounds),
        meta=_meta(meta),
        embed_model=embed_model,
        created_at=_time(value["created_at"]),
        line_id=event_id,
    )


# The turns one imported session summary may cover, at most.
MAX_COVERED = 10_000
# The payload keys of consolidation events that name another fact (mapped like `memory_id`).
LINKED_IDS: dict[str, tuple[str, ...]] = {
    EventType.LONGTERM_MERGED: ("into_id",),
    EventType.LONGTERM_SUPERSEDED: ("by_id",),
}


def _payload(kind: str, data: dict[str, Any], bounds: ImportBounds) -> dict[str, Any]:
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
            out["query"] = truncate(_string(data, "query", MAX_LINE_BYTES, default=""), limit)
            finish = data.get("finish_reason")
            out["finish_reason"] = None if finish is None else _string(data, "finish_reason", 40)
        if kind == EventType.SESSION_SUMMARISED:
            out["text"] = _string(data, "text", MAX_LINE_BYTES)
            covers = data["covers"]
            if not isinstance(covers, list) or len(covers) > MAX_COVERED:
                raise ValueError(f"'covers' must be a list of at most {MAX_COVERED} event ids")
            out["covers"] = [_string({"id": c}, "id", MAX_ID, empty=False) for c in covers]
            out["last_at"] = _time(data["last_at"]).isoformat()
        return out
    if kind.startswith("curated."):
        doc = data["kind"]
        if doc not in _KINDS:
            raise ValueError("'kind' must be 'memory' or 'user'")
        if doc == "memory" and user:
            raise ValueError("MEMORY.md is token-wide: its 'user' must be empty")
        out = {"kind": doc, "user": user}
        if kind == EventType.CURATED_REPLACED:
            out["body"] = body = _string(data, "body", MAX_LINE_BYTES)
            if len(body.encode("utf-8")) > bounds.curated_max_bytes:
                raise _TooLarge(
                    f"curated documents are limited to {bounds.curated_max_bytes} bytes "
                    "(CURATED_MAX_BYTES)"
                )
        return out
    # longterm.*
    out = {
        "user": user,
        "memory_id": _string(data, "memory_id", MAX_ID, empty=False),
        "source_event_id": _optional_id(data, "source_event_id"),
    }
    if kind == EventType.LONGTERM_DELETED:
        out["reason"] = _string(data, "reason", MAX_LABEL, default="")
    else:
        out["text"] = truncate(_string(data, "text", MAX_LINE_BYTES), limit)
    # Consolidation: the fact this one was merged into, or the one that superseded it.
    for key in LINKED_IDS.get(kind, ()):
        out[key] = _string(data, key, MAX_ID, empty=False)
    if kind == EventType.LONGTERM_SUPERSEDED:
        out["by_text"] = truncate(_string(data, "by_text", MAX_LINE_BYTES), limit)
    return out


def _meta(meta: dict[str, Any]) -> dict[str, Any]:
    # Only what the log's own meta holds; anything else an export carries is dropped.
    kept: dict[str, Any] = {}
    request_id = meta.get("request_id")
    if isinstance(request_id, str) and len(request_id) <= MAX_ID:
        kept["request_id"] = request_id
    if meta.get("backfilled") is True:
        kept["backfilled"] = True
    return kept


def _time(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError("'created_at' must be an ISO 8601 time")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("'created_at' must be an ISO 8601 time") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)


def _label(data: dict[str, Any], name: str) -> str:
    text = _string(data, name, MAX_LABEL)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError(f"{name!r} holds a control character")
    return text


def _optional_id(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    return _string(data, name, MAX_ID, empty=False)


def _string(
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
