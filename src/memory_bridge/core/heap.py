"""Keeping CPython's cyclic garbage collector off the hot path.

A full (oldest-generation) collection traverses every tracked object of the process. Once
Mem0, the OpenAI SDK, qdrant-client's models and the loaded Qdrant collections are in memory
that is over a million objects, and each full collection stops the event loop and every
request in flight for a long pause (docs/performance.md#figures-behind-code-choices).
Nearly all of those objects live as long as the process (modules, classes, long-lived
clients, loaded collections). `gc.freeze()` moves everything allocated so far into the
permanent generation, which no collection visits; the collector then only looks at what was
allocated since. It is called once the server has started and after each one-off heavy load
(Mem0 and its providers imported, a Qdrant client opened, an embedding model loaded).

Frozen objects are still freed when their last reference goes; only cyclic garbage that
happens to exist at the moment of freezing stays in memory. No collection runs first: it would
be the very pause this avoids (and from a memory thread it would hold the GIL throughout); the
leftovers of an import are a one-off few kilobytes.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_long_lived() -> None:
    """Take every object allocated so far out of the collector's way."""
    gc.freeze()
    log.debug("%d objects frozen out of garbage collection", gc.get_freeze_count())
