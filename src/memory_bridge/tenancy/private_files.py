"""Owner-only files and directories: the data directory, the database, the secret key file.

They are created owner-only from the start (never created loose and tightened afterwards,
which would leave a window), and an existing looser one (made by an older version, restored
from a backup, copied with `cp`) is tightened with one warning, so other local users cannot
read the database or the key that decrypts its provider keys.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> None:
    """Create `path` (and any missing parents) as 0700, or tighten it if it is looser."""
    if not path.exists():
        # The mode applies to the last component; parents the operator did not name keep
        # the default, as `mkdir -p` does. umask can only remove bits from 0700.
        path.mkdir(parents=True, mode=PRIVATE_DIR, exist_ok=True)
    tighten(path)


def private_file(path: Path) -> None:
    """Create an empty `path` as 0600 if it is missing, or tighten it if it is looser."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    tighten(path)


def tighten(path: Path) -> bool:
    """Remove every group and other permission bit from `path`; True if it had any.

    Missing paths and paths owned by someone else are left alone (the latter with a warning:
    only their owner can change them).
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return False
    if st.st_uid != os.getuid():
        log.warning("%s is readable by other users (mode %o) and owned by another user", path, mode)
        return False
    path.chmod(mode & 0o700)
    log.warning(
        "%s was accessible to other users (mode %o); tightened to %o", path, mode, mode & 0o700
    )
    return True


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically, as a 0600 file, so no reader sees half of it."""
    if not path.parent.exists():
        private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # A leftover from a crash may be looser: start from a fresh file, never write into it.
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
