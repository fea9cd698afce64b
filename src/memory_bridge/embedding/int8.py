"""`all-MiniLM-L6-v2-int8`: the packaged MiniLM with int8 weights, an opt-in local model.

Why: a recall query's MiniLM forward pass is most of the proxy's own time before it forwards a
request (docs/performance.md, "The dense model"); with its matrix weights in int8 the same
graph runs ~1.5-1.9x faster on ONNX Runtime. Its vectors are close to the fp32 model's but not
the same (cosine mean 0.991, min 0.960 on LoCoMo's 3,435 messages), so it is a model of its own:
a token opts in with `embed_provider: "local"`, `embed_body: {"model": "all-MiniLM-L6-v2-int8"}`,
and gets its own model id (`local:all-MiniLM-L6-v2-int8`, Mem0's `mem0:all-MiniLM-L6-v2-int8`):
its vectors never share a shard with the fp32 model's (docs/decisions.md, "The int8 MiniLM").

How, at first load (nothing downloaded; the quantiser's output file is read back from a
temporary directory and deleted): the fp32 graph is
exported and checked exactly as `onnx_encoder` does for the default model, then ONNX Runtime's
dynamic quantisation turns the MatMul weights into int8 with one scale per output channel
(one scale per tensor loses too much: cosine min 0.90). Activations are quantised at run time
with one scale per tensor, so a short text padded beside a long one would get the long one's
coarser scale ("hello" beside a 128-piece text: cosine 0.967 to fp32, alone 0.982): every text
runs in a forward pass of its own, its vector then independent of its neighbours (which costs
no throughput: batches of 8 messages in turn order spent more on padding than they saved).
The quantised graph must then stay within `MIN_COSINE` of sentence-transformers' vectors on
the probes. Where it does not (or quantising fails), the model loads as the fp32 graph with a
warning: the vectors it then stores are the ones the int8 vectors already stored were checked
against, within the bound.
"""

from __future__ import annotations

import importlib
import logging
import tempfile
from pathlib import Path
from typing import Any

from memory_bridge.embedding import onnx_encoder
from memory_bridge.embedding.onnx_encoder import OnnxEncoder

log = logging.getLogger(__name__)

# The name a token's `embed_body.model` gives to opt in; also its model id's model part.
INT8_MODEL = "all-MiniLM-L6-v2-int8"
# The smallest cosine to the fp32 model's vector allowed on any probe (measured: 0.981 and up on
# the probes, 0.981 at worst on 1,000 LoCoMo questions; per-tensor scales, rejected, reach 0.90).
MIN_COSINE = 0.97


def from_sentence_transformer(model: Any, torch: Any) -> tuple[OnnxEncoder | None, bool]:
    """An encoder for `model` on ONNX Runtime, and whether it is the int8 one: the int8 graph
    within the bound, else the checked fp32 graph (warned), else (None, False): torch, as the
    default model would fall back (`onnx_encoder.checked_export` logs why)."""
    checked = onnx_encoder.checked_export(model, torch)
    if checked is None:
        log.warning("%s runs as the fp32 model on torch", INT8_MODEL)
        return None, False
    try:
        quantization = importlib.import_module("onnxruntime.quantization")
        onnx = importlib.import_module("onnx")
        quantized = _quantize(onnx, quantization, checked.graph)
        int8 = onnx_encoder.session_encoder(
            checked.ort,
            quantized,
            model,
            checked.names,
            normalize=checked.normalize,
            one_per_pass=True,
        )
        cosine, _ = onnx_encoder.probe_gap(int8, model, torch)
    except Exception as exc:  # a quantiser or runtime failure: the fp32 graph still works
        log.warning(
            "%s: quantising failed (%s): runs as the fp32 model", INT8_MODEL, type(exc).__name__
        )
        return checked.encoder, False
    if cosine < MIN_COSINE:
        log.warning(
            "%s: the int8 graph's vectors are too far from the fp32 model's (cosine %.4f < %.2f):"
            " runs as the fp32 model",
            INT8_MODEL,
            cosine,
            MIN_COSINE,
        )
        return checked.encoder, False
    return int8, True


def _quantize(onnx: Any, quantization: Any, graph: bytes) -> bytes:
    """`graph` with its MatMul weights in int8, one scale per output channel."""
    quiet = _QuantizerChatter()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory(prefix="minilm-int8-") as tmp:
            return _quantize_to(onnx, quantization, graph, Path(tmp) / "int8.onnx")
    finally:
        root.removeFilter(quiet)


class _QuantizerChatter(logging.Filter):
    """The quantiser logs a line per tensor it leaves alone on the root logger: dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "quantization" not in Path(record.pathname).parts


def _quantize_to(onnx: Any, quantization: Any, graph: bytes, target: Path) -> bytes:
    quantization.quantize_dynamic(
        onnx.load_from_string(graph),
        target,
        weight_type=quantization.QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        # Only weights (a constant second operand): attention's activation x activation
        # products stay in float.
        extra_options={"MatMulConstBOnly": True},
    )
    return target.read_bytes()
