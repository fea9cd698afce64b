"""Staged imports left behind: an import's body is staged in `data/imports/` as plaintext,
locked (`flock`) while the import uses it and deleted when it ends. A process killed mid-import
leaves its file; this deletes every staged file no import holds (at start-up, and by every
erasure), never one in flight."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

STAGED_GLOB = "import-*.ndjson"


def sweep_stale(directory: Path) -> int:
    """Delete the staged imports no import is using (a killed one's); how many."""
    if not directory.is_dir():
        return 0
    removed = 0
    for path in directory.glob(STAGED_GLOB):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # in use by an import of this or another process
        else:
            path.unlink(missing_ok=True)
            removed += 1
        finally:
            os.close(fd)
    return removed
