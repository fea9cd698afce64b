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
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memory_bridge.core.errors import ProxyError
from memory_bridge.lifecycle.import_payloads import (
    LINKED_IDS,
    MAX_ID,
    MAX_LABEL,
    ImportBounds,
    TooLarge,
    meta_of,
    payload_of,
    string,
    time_of,
)
from memory_bridge.lifecycle.transfer import CLASS_OF, FORMAT, VERSION
from memory_bridge.tenancy.private_files import private_dir

__all__ = ["LINKED_IDS", "ImportBounds", "ImportEvent", "ImportRefused", "Staged", "stage"]

MAX_LINE_BYTES = 16 * 1024 * 1024
_BATCH_BYTES = 1024 * 1024


class ImportRefused(ProxyError):
    def __init__(self, line: int, reason: str, status: int = 422) -> None:
        super().__init__(status, "invalid_request_error", f"Line {line}: {reason}")
        self.line = line


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
    except TooLarge as exc:
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
    event_id = string(value, "event_id", MAX_ID, empty=False)
    payload = value["payload"]
    if not isinstance(payload, dict):
        raise ValueError("'payload' must be an object")
    meta = value.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError("'meta' must be an object")
    embed_model = value.get("embed_model")
    if embed_model is not None:
        embed_model = string(value, "embed_model", MAX_LABEL)
    origin = meta.get("origin", event_id)
    if not isinstance(origin, str) or not origin or len(origin) > MAX_ID:
        raise ValueError("'meta.origin' must be an id")
    return ImportEvent(
        origin=origin,
        type=kind,
        payload=payload_of(kind, payload, bounds),
        meta=meta_of(meta),
        embed_model=embed_model,
        created_at=time_of(value["created_at"]),
        line_id=event_id,
    )
