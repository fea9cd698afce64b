"""Optimising an embedded shard without stalling the process that serves it.

`EdgeShard.optimize()` (the HNSW build and segment merge) holds the GIL for its whole run
(qdrant-edge-py 0.9.0; docs/performance.md#figures-behind-code-choices). Run in the serving
process, it would freeze every request, the event loop included.
So the build runs in a child process, on a copy of the shard:

1. under the shard's write lock: flush, copy `shard/` to `shard.next/`, start a journal of
   every later write (reads and writes carry on against the live shard meanwhile);
2. a child Python process loads the copy and optimises it (niced, output captured);
3. under the write lock: the journal is replayed onto the copy, which is flushed and closed;
4. under the write and read locks (a few milliseconds): the live shard is closed,
   `shard/` becomes `shard.prev/`, `shard.next/` becomes `shard/`, and it is loaded.

A crash at any point leaves a complete shard: `recover` (run at every open) puts
`shard.prev/` back if `shard/` is missing and removes leftovers.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from memory_bridge.vectors.index import VectorIndexError

__all__ = ["LIVE", "NEXT", "PREV", "copy_shard", "recover", "run_optimizer"]

logger = logging.getLogger(__name__)

LIVE = "shard"
NEXT = "shard.next"
PREV = "shard.prev"

# Runs in the child: nothing of MemoryBridge is imported, only the engine.
_CHILD = """
import os, sys
import qdrant_edge
try:
    os.nice(10)  # the build yields the CPU to the process serving requests
except OSError:
    pass
shard = qdrant_edge.EdgeShard.load(sys.argv[1])
try:
    changed = shard.optimize()
    shard.flush()
finally:
    shard.close()
print("changed" if changed else "unchanged")
"""


def recover(home: Path) -> None:
    """Leave exactly one complete shard in `home` after an interrupted optimisation."""
    live, nxt, prev = home / LIVE, home / NEXT, home / PREV
    if not live.exists() and prev.exists():
        # Interrupted between the two renames: the previous shard is complete (writes were
        # held off during the swap), the new one may not have had its journal replayed.
        logger.warning("vector shard %s: restoring the shard from before an optimisation", home)
        prev.rename(live)
    for leftover in (nxt, prev):
        if leftover.exists():
            shutil.rmtree(leftover)


def copy_shard(home: Path) -> Path:
    """Copy the (flushed) live shard to `shard.next/`; the caller holds the write lock."""
    target = home / NEXT
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(home / LIVE, target)
    return target


def run_optimizer(path: Path, timeout: float) -> bool:
    """Optimise the shard at `path` in a child process; True if any segment changed."""
    try:
        done = subprocess.run(  # noqa: S603 - our interpreter, our constant script, our path
            [sys.executable, "-c", _CHILD, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise VectorIndexError(f"optimising {path} took longer than {timeout:g} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-5:]
        raise VectorIndexError(
            f"optimising {path} failed (exit {done.returncode}): {' | '.join(tail)}"
        )
    return done.stdout.strip() == "changed"
