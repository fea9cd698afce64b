"""What export and import share: the format's name and version, the content classes, and the
install id that names where an export came from."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from memory_bridge.events.model import EventType
from memory_bridge.tenancy.private_files import private_dir

FORMAT = "memory-bridge.export"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"

# The content classes an export may carry, each opt-in, and the event types of each. The
# `user.erased` tombstone is in none: it is this install's record of an erasure, and applied
# to another token it would erase that token's own end user.
CLASSES: dict[str, tuple[EventType, ...]] = {
    "curated": (EventType.CURATED_REPLACED, EventType.CURATED_DELETED),
    "longterm": (
        EventType.LONGTERM_RETAINED,
        EventType.LONGTERM_UPDATED,
        EventType.LONGTERM_DELETED,
        EventType.LONGTERM_MERGED,
        EventType.LONGTERM_SUPERSEDED,
        EventType.LONGTERM_RESTORED,
    ),
    "sessions": (
        EventType.SESSION_STARTED,
        EventType.SESSION_APPENDED,
        EventType.SESSION_COMPACTED,
        EventType.SESSION_DELETED,
        EventType.SESSION_SUMMARISED,
    ),
}
CLASS_OF: dict[str, str] = {str(t): name for name, types in CLASSES.items() for t in types}
CLASS_PATTERN = r"^\s*(curated|longterm|sessions)?\s*(,\s*(curated|longterm|sessions)\s*)*$"

INSTALL_ID_FILE = "install-id"


class UnknownClass(ValueError):
    pass


def parse_classes(text: str | None) -> tuple[str, ...]:
    """`include=`'s comma list as the known classes it names, in a fixed order."""
    names = {part.strip() for part in (text or "").split(",") if part.strip()}
    unknown = names - CLASSES.keys()
    if unknown:
        raise UnknownClass(
            f"Unknown content class {sorted(unknown)[0]!r}: use {', '.join(CLASSES)}."
        )
    return tuple(name for name in CLASSES if name in names)


def install_id(data_dir: Path) -> str:
    """This install's id: a random UUID kept in the data directory, made on first use.

    It names where an export came from (its header) and nothing else: no decision depends on
    it. Written whole under a temporary name, then linked into place (which fails if the file
    exists): two processes starting at once agree on one id, and none reads a half-written one.
    """
    path = data_dir / INSTALL_ID_FILE
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    private_dir(data_dir)
    new = str(uuid.uuid4())
    temporary = data_dir / f".{INSTALL_ID_FILE}.{new}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(new + "\n")
    try:
        os.link(temporary, path)
    except FileExistsError:
        return _read(path)
    finally:
        temporary.unlink()
    return new


def _read(path: Path) -> str:
    text = path.read_text().strip()
    return str(uuid.UUID(text))
