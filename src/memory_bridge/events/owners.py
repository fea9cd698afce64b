"""Who holds a job's lease, and whether that holder is gone.

A lease owner names its process: `host:space:pid:start:nonce` — the host name, a digest of
the kernel's boot id and the process's pid namespace (the space in which its pid means
something), the process id and the process's start time (clock ticks since boot, so a pid
reused after a crash is told apart), and a per-worker nonce. A worker starting in the same
host, boot and pid namespace can tell for certain that a lease's holder is dead (no process
with that pid and start time) and give its jobs back at once rather than wait for the lease
to expire. Any other holder (another host, container or boot, or an identity that cannot be
read) is judged only by its lease, which its heartbeat keeps short: two containers may share
a host name and a boot, never a pid namespace.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
HOST_CHARS = 40  # the owner column holds 80 characters


@dataclass(frozen=True, slots=True)
class Holder:
    host: str
    space: str
    pid: int
    start: str


def _pid_space() -> str:
    """A digest of this kernel's boot and this process's pid namespace; "-" when unknown."""
    try:
        seen = _BOOT_ID.read_text().strip() + os.readlink("/proc/self/ns/pid")
    except OSError:
        return "-"
    return hashlib.blake2b(seen.encode(), digest_size=4).hexdigest()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; None when there is no such process
    (or no /proc to ask)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) is in parentheses and may hold spaces.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def this_host() -> tuple[str, str]:
    return socket.gethostname()[:HOST_CHARS].replace(":", "_"), _pid_space()


def owner_id() -> str:
    host, space = this_host()
    pid = os.getpid()
    return f"{host}:{space}:{pid}:{_start_time(pid) or '-'}:{uuid.uuid4().hex[:6]}"


def holder(owner: str) -> Holder | None:
    parts = owner.split(":")
    if len(parts) != 5 or not parts[2].isdigit():
        return None  # another format (an older version's): its lease decides
    return Holder(parts[0], parts[1], int(parts[2]), parts[3])


def is_gone(owner: str) -> bool:
    """Whether `owner`'s process certainly no longer runs (False when it cannot be known)."""
    found = holder(owner)
    here = this_host()
    if found is None or (found.host, found.space) != here or "-" in (here[1], found.start):
        return False
    return _start_time(found.pid) != found.start
