"""A sentence-transformers model's forward pass on ONNX Runtime, with the same vectors.

Why: a recall query's MiniLM embedding on torch took most of the recall stage's budget; the
same graph on ONNX Runtime takes less than half the time (fused kernels, no eager-mode dispatch
per operator), and `InferenceSession.run` may be called from several threads at once, so a
request's query no longer waits behind the worker's batch of messages (docs/performance.md,
"bench_recall.py --speed"; docs/decisions.md).

The model's transformer is exported once per process with torch's own exporter, in memory (a
one-off cost at first use), then checked: its vectors must equal sentence-transformers' on a
few probes, a padded batch included (the exporter traces, and a traced graph can bake in the
shape it was traced with). Any difference, a pipeline other than transformer → mean pooling (→
normalise), or a missing `onnxruntime`/`onnx`, and the caller keeps torch: this is an
accelerator, never a second source of truth for what a vector is.
"""

from __future__ import annotations

import importlib
import io
import logging
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

# Texts the exported graph must embed exactly as sentence-transformers does: surrounding
# whitespace (which sentence-transformers strips), non-ASCII, one past the model's length limit
# (truncation), and, embedded together, different lengths (padding and its attention mask).
PROBES = (
    "hello",
    "  When did Caroline go to the LGBTQ support group, and what did she learn there?  ",
    "Zoë's café in Zürich serves crème brûlée — 5 stars 🎉",
    " ".join(f"word{i}" for i in range(600)),
)
MIN_COSINE = 0.99999
# Texts per forward pass of a long batch (sorted by length first, see `encode`).
CHUNK = 8
MAX_NORM_GAP = 1e-4  # relative to the expected vector's length


class OnnxEncoder:
    """Tokenise, run the exported transformer, mean-pool over the attention mask, normalise."""

    def __init__(
        self,
        session: Any,
        tokenizer: Any,
        input_names: Sequence[str],
        max_length: int,
        *,
        normalize: bool,
        one_per_pass: bool = False,
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._input_names = tuple(input_names)
        self._max_length = max_length
        self._normalize = normalize
        # Each text in a forward pass of its own (the int8 graph: see `embedding.int8`).
        self._one_per_pass = one_per_pass
        # Hugging Face fast tokenizers raise "Already borrowed" when used from two threads at
        # once; the session itself is safe to share, so only tokenising is serialised.
        self._tokenizer_lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self._one_per_pass and len(texts) > 1:
            return np.concatenate([self._encode_padded([text]) for text in texts])
        if len(texts) <= CHUNK:
            return self._encode_padded(texts)
        # Padding costs a forward pass over the longest text's length for every row: texts of
        # similar lengths go together (as sentence-transformers batches them), in small chunks.
        order = sorted(range(len(texts)), key=lambda n: len(texts[n]))
        result = np.empty((len(texts), 0), dtype=np.float32)
        for start in range(0, len(order), CHUNK):
            rows = order[start : start + CHUNK]
            vectors = self._encode_padded([texts[n] for n in rows])
            if result.shape[1] == 0:
                result = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            result[rows] = vectors
        return result

    def _encode_padded(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._tokenizer_lock:
            encoded = self._tokenizer(
                [text.strip() for text in texts],
                padding=True,
                truncation=True,
                max_length=self._max_length,
                return_tensors="np",
            )
        feeds = {name: np.asarray(encoded[name], dtype=np.int64) for name in self._input_names}
        hidden = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        mask = np.asarray(encoded["attention_mask"], dtype=np.float32)[..., None]
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        if self._normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.clip(norms, 1e-12, None)
        result: npt.NDArray[np.float32] = pooled.astype(np.float32, copy=False)
        return result


@dataclass(frozen=True, slots=True)
class CheckedExport:
    """The model's graph on ONNX Runtime, checked to give the model's own vectors, and what
    another encoder of the same graph needs (`embedding.int8` quantises it)."""

    encoder: OnnxEncoder
    graph: bytes
    names: list[str]
    normalize: bool
    ort: Any


def from_sentence_transformer(model: Any, torch: Any) -> OnnxEncoder | None:
    """An encoder giving `model.encode`'s vectors faster, or None (logged) where it can't."""
    checked = checked_export(model, torch)
    return checked.encoder if checked is not None else None


def checked_export(model: Any, torch: Any) -> CheckedExport | None:
    """`model` exported and checked (see `from_sentence_transformer`), or None (logged)."""
    try:
        ort = importlib.import_module("onnxruntime")
        importlib.import_module("onnx")  # torch's exporter writes through it
    except ImportError:
        log.info("onnxruntime or onnx not installed: the local embedder runs on torch")
        return None
    normalize = _plain_pipeline(model)
    if normalize is None:
        log.info("local model is not transformer + mean pooling: it runs on torch")
        return None
    try:
        graph, names = export_graph(model, torch)
        encoder = session_encoder(ort, graph, model, names, normalize=normalize)
        same = _same_vectors(encoder, model, torch)
    except Exception as exc:  # any exporter or runtime failure means "use torch"
        log.warning(
            "ONNX export of the local model failed (%s): it runs on torch", type(exc).__name__
        )
        return None
    if not same:
        log.warning(
            "the ONNX graph's vectors differ from the model's: the local model runs on torch"
        )
        return None
    return CheckedExport(encoder, graph, names, normalize, ort)


def _plain_pipeline(model: Any) -> bool | None:
    """Whether the pipeline ends in a normalisation, or None if it is not one we reproduce."""
    kinds = [type(module).__name__ for module in model]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return None
    config = model[1].get_config_dict()
    mean = config.get("pooling_mode") == "mean" or (
        config.get("pooling_mode_mean_tokens") is True
        and not any(
            config.get(key)
            for key in (
                "pooling_mode_cls_token",
                "pooling_mode_max_tokens",
                "pooling_mode_mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens",
                "pooling_mode_lasttoken",
            )
        )
    )
    return len(kinds) == 3 if mean else None


def export_graph(model: Any, torch: Any) -> tuple[bytes, list[str]]:
    """The model's transformer as a serialised ONNX graph, and the names of its inputs."""
    tokenizer = model.tokenizer
    transformer = model[0].auto_model
    # Two texts of different lengths, so the graph is traced through the padding mask.
    sample = tokenizer(["a", "a longer sample sentence"], padding=True, return_tensors="pt")
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]

    class LastHiddenState(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *tensors: Any) -> Any:
            return self.transformer(**dict(zip(names, tensors, strict=True)))[0]

    graph = io.BytesIO()
    # The tracer warns of Python branches on tensor values; the graph is checked against the
    # model's own vectors afterwards (`_same_vectors`), which is what those warnings ask for.
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState().eval(),
            tuple(sample[name] for name in names),
            graph,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={
                name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]
            },
            opset_version=17,
            dynamo=False,
        )
    return graph.getvalue(), names


def session_encoder(
    ort: Any,
    graph: bytes,
    model: Any,
    names: Sequence[str],
    *,
    normalize: bool,
    one_per_pass: bool = False,
) -> OnnxEncoder:
    """An encoder running `graph` (serialised ONNX) with `model`'s tokenizer and length limit."""
    options = ort.SessionOptions()
    # One thread per call: on a 2-core proxy the other core is serving requests (the same
    # reasoning as the torch path's short calls), and concurrent callers each get their own.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])
    return OnnxEncoder(
        session,
        model.tokenizer,
        names,
        int(model.max_seq_length),
        normalize=normalize,
        one_per_pass=one_per_pass,
    )


def _same_vectors(encoder: OnnxEncoder, model: Any, torch: Any) -> bool:
    cosine, norm_gap = probe_gap(encoder, model, torch)
    return cosine >= MIN_COSINE and norm_gap <= MAX_NORM_GAP


def probe_gap(encoder: OnnxEncoder, model: Any, torch: Any) -> tuple[float, float]:
    """How far `encoder`'s vectors are from the model's own on `PROBES` (each alone, then all
    together, padded): the smallest cosine and the largest norm gap (relative to the model's
    vector's length); (-1, inf) when the shapes differ."""
    with torch.inference_mode():
        expected = [model.encode([text], convert_to_numpy=True) for text in PROBES]
        expected.append(model.encode(list(PROBES), convert_to_numpy=True))
    got = [encoder.encode([text]) for text in PROBES]
    got.append(encoder.encode(list(PROBES)))
    worst_cosine, worst_gap = 1.0, 0.0
    for want, have in zip(expected, got, strict=True):
        if want.shape != have.shape:
            return -1.0, float("inf")
        want_norm = np.linalg.norm(want, axis=1)
        have_norm = np.linalg.norm(have, axis=1)
        cosine = (want * have).sum(axis=1) / np.clip(want_norm * have_norm, 1e-12, None)
        norm_gap = np.abs(want_norm - have_norm) / np.clip(want_norm, 1e-12, None)
        worst_cosine = min(worst_cosine, float(cosine.min()))
        worst_gap = max(worst_gap, float(norm_gap.max()))
    return worst_cosine, worst_gap
