"""The one Qdrant client of the process, shared by every Mem0 instance.

Local mode (`QDRANT_PATH`, the default) allows one client per storage path per process, and
that client is not thread-safe: concurrent calls from a thread pool corrupt it (measured:
`SystemError`, `IndexError`, sqlite "cannot commit - no transaction is active", lost points in
5 of 5 trials with 8 threads). So in local mode every call that reaches the storage is
serialised by one lock. Calls are short (a filtered search in a 1,000-point collection takes
~9 ms), while the slow parts of Mem0 (embedding and LLM calls over HTTP) happen outside it.
Server mode (`QDRANT_URL`) needs no lock: the HTTP client is thread-safe.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client.local.qdrant_local import QdrantLocal


class _Serialised:
    """Proxy for the local backend: every method call holds the lock."""

    def __init__(self, inner: QdrantLocal, lock: threading.RLock) -> None:
        self._inner = inner
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


class SharedQdrantClient(QdrantClient):
    """A `QdrantClient` (so Mem0 accepts it as its `client`) that is safe to share.

    Local mode: the backend behind the public API is wrapped so that every call is serialised.
    Never copied: Mem0 deep-copies its vector store config (which holds this client) for its
    entity store; a copy would duplicate the whole local storage in memory.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local = isinstance(self._client, QdrantLocal)
        if isinstance(self._client, QdrantLocal):
            self._client = _Serialised(self._client, threading.RLock())  # type: ignore[assignment]

    def __copy__(self) -> SharedQdrantClient:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedQdrantClient:
        return self


def open_client(path: Path, url: str, api_key: str) -> SharedQdrantClient:
    """Server mode when `url` is set, else local mode under `path` (created if missing)."""
    if url:
        return SharedQdrantClient(url=url, api_key=api_key or None)
    # Mem0 asks for payload indexes on the collections it creates; local mode has none.
    warnings.filterwarnings(
        "ignore", "Payload indexes have no effect in the local Qdrant", UserWarning
    )
    path.mkdir(parents=True, exist_ok=True)
    return SharedQdrantClient(path=str(path))


def collection_names(client: QdrantClient) -> list[str]:
    return [c.name for c in client.get_collections().collections]
