"""The embedded adapter: one Qdrant Edge shard per (token, model, dims) in the data directory,
at most `max_open` of them open at once.

Layout: ``<data>/vectors/t<token>/<model-slug>-d<dims>/`` holds ``meta.json`` (what the shard
is, and the BM25 settings its documents were tokenized with) and ``shard/`` (the engine's);
`edge_index.EdgeIndex` is one shard.

The engine keeps one `EdgeIndex` per shard it has opened (a small object), so every caller of
one shard shares its locks; the engine shards behind them are bounded by `edge_slots`: the
least recently used idle one is closed when one more must open, and reopens on its next use.
An erasure (`drop_token`, `drop_shard`) closes the index for good and removes its files,
whether its engine shard was open or parked.

Locks: the engine's own lock guards its maps for a moment; opening, creating or dropping a
shard takes its token's lock instead (opening takes tenths of a second), so one token's slow
shard never holds back another token's calls. Order: a token's lock, then the engine's.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

from memory_bridge.core import metrics
from memory_bridge.vectors.common import Bm25Encoder, Bm25Settings, shard_name
from memory_bridge.vectors.edge_index import EdgeIndex
from memory_bridge.vectors.edge_schema import META, ensure_room
from memory_bridge.vectors.edge_slots import OpenShards
from memory_bridge.vectors.index import IndexClosed, ShardKey, ShardState, VectorIndexError

__all__ = ["DEFAULT_MAX_OPEN", "EdgeEngine", "EdgeIndex"]

# Shards open at once by default (VECTOR_MAX_OPEN_SHARDS): docs/configuration.md.
DEFAULT_MAX_OPEN = 32


class EdgeEngine:
    """Opens embedded shards under ``<data_dir>/vectors``; one engine per process."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        bm25: Bm25Settings | None = None,
        optimize_timeout: float = 3600.0,
        min_free_bytes: int = 0,
        max_open: int = DEFAULT_MAX_OPEN,
    ) -> None:
        self._root = Path(data_dir) / "vectors"
        self._min_free = min_free_bytes
        self._bm25 = bm25 or Bm25Settings()
        self._optimize_timeout = optimize_timeout
        self._lock = threading.Lock()  # the maps below; never held while a shard opens
        # One lock per token, held while a shard of it opens or is created (`_token_lock`).
        self._token_locks: dict[int, threading.Lock] = {}
        # Every index opened since start, open or parked: one object per shard, whoever asks.
        self._open: dict[ShardKey, EdgeIndex] = {}
        self.slots = OpenShards(max_open, on_reopen=metrics.shard_reopened)
        # One encoder per BM25 settings, shared by the shards made with them (thread-safe).
        self._encoders: dict[Bm25Settings, Bm25Encoder] = {}
        self._closed = False

    def index(self, token_id: int, model_id: str, dims: int) -> EdgeIndex:
        found = self._open_index(ShardKey(token_id, model_id, dims), create=True)
        assert found is not None  # (created if missing)
        return found

    def existing(self, token_id: int, model_id: str, dims: int) -> EdgeIndex | None:
        return self._open_index(ShardKey(token_id, model_id, dims), create=False)

    def _open_index(self, key: ShardKey, *, create: bool) -> EdgeIndex | None:
        found = self._known(key)
        if found is not None:
            return found
        # Opening or creating a shard takes tenths of a second (files, the engine's load, maybe
        # parking another): under the token's own lock, so no other token waits for it.
        with self._token_lock(key.token_id):
            found = self._known(key)  # opened meanwhile by whoever held the lock
            if found is not None:
                return found
            home = self._root / f"t{key.token_id}" / shard_name(key)
            if not create and not (home / META).is_file():
                return None  # a read path creates nothing (and finds nothing a drop removed)
            if not home.exists():
                ensure_room(self._root, self._min_free)
            found = EdgeIndex(
                home,
                key,
                self._bm25,
                optimize_timeout=self._optimize_timeout,
                min_free_bytes=self._min_free,
                slots=self.slots,
                encoder=self._encoder,
            )
            with self._lock:
                if not self._closed:
                    self._open[key] = found
                    return found
            found.close()
            raise IndexClosed("the vector engine is closed")

    def drop_token(self, token_id: int) -> int:
        with self._token_lock(token_id):
            with self._lock:
                gone = [self._open.pop(k) for k in list(self._open) if k.token_id == token_id]
            for found in gone:  # waits for its reads and writes under way: not the engine lock
                found.close()
            home = self._root / f"t{token_id}"
            if not home.exists():
                return 0
            shards = sum(1 for child in home.iterdir() if child.is_dir())
            shutil.rmtree(home)
            return shards

    def drop_shard(self, token_id: int, model_id: str, dims: int) -> bool:
        key = ShardKey(token_id, model_id, dims)
        with self._token_lock(token_id):
            with self._lock:
                found = self._open.pop(key, None)
            if found is not None:
                found.close()
            home = self._root / f"t{token_id}" / shard_name(key)
            if not home.exists():
                return False
            shutil.rmtree(home)
            return True

    def shards(self, token_id: int) -> list[ShardKey]:
        home = self._root / f"t{token_id}"
        if not home.is_dir():
            return []
        found = []
        for meta in sorted(home.glob(f"*/{META}")):
            try:
                data = json.loads(meta.read_text())
                found.append(ShardKey(token_id, str(data["model_id"]), int(data["dims"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise VectorIndexError(f"vector shard {meta.parent}: unreadable {META}") from exc
        return found

    def open_shards(self) -> int:
        """How many engine shards are open now (at most `max_open`, but for busy ones)."""
        return len(self.slots)

    def shard_state(self) -> ShardState:
        open_now, parked = self.slots.state()
        return ShardState(open=open_now, parked=parked, bound=self.slots.limit)

    def _known(self, key: ShardKey) -> EdgeIndex | None:
        """The index of `key` if this engine has it (open or parked), without waiting for any
        token's lock."""
        with self._lock:
            if self._closed:
                raise IndexClosed("the vector engine is closed")
            found = self._open.get(key)
            return found if found is not None and not found.closed else None

    def _token_lock(self, token_id: int) -> threading.Lock:
        """Held while one of the token's shards opens, is created or is dropped: a drop never
        removes files a creation is still writing. Taken before the engine lock, never after."""
        with self._lock:
            found = self._token_locks.get(token_id)
            if found is None:
                found = self._token_locks[token_id] = threading.Lock()
            return found

    def _encoder(self, settings: Bm25Settings) -> Bm25Encoder:
        with self._lock:  # called by a shard being created, under its token's lock only
            found = self._encoders.get(settings)
            if found is None:
                found = self._encoders[settings] = Bm25Encoder(settings)
            return found

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for found in self._open.values():
                found.close()
            self._open.clear()
