"""The opt-in int8 MiniLM (`all-MiniLM-L6-v2-int8`): a token naming it gets a model id of its
own, the packaged model quantised at load with no network, vectors within the documented bound
of the fp32 model's (and not the same ones), and the fp32 graph, loudly, when the quantised one
falls outside it."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from memory_bridge.embedding import int8
from memory_bridge.embedding import local as local_embedder
from memory_bridge.embedding.embedders import default_spec, embedder_spec
from memory_bridge.embedding.local import DEFAULT_DIMS, LocalEmbedding
from memory_bridge.embedding.onnx_encoder import PROBES
from memory_bridge.tenancy.config import TokenConfig

pytestmark = pytest.mark.skipif(
    not local_embedder.local_extra_installed(), reason="needs the local extra"
)

# The load-time check's probes, and sentences (a one-word reply like "thanks" can read 0.956:
# the bound is the probes', docs/performance.md "The dense model").
TEXTS = [
    *PROBES,
    "When did Caroline go to the LGBTQ support group?",
    "I bake sourdough bread every Sunday morning",
    "Melanie painted a lake at sunrise last summer, she said it calmed her down.",
    "What kind of car do I own?",
]


def _token(model: str | None) -> TokenConfig:
    return TokenConfig(
        name="t",
        llm_base_url="http://127.0.0.1:9",
        embed_provider="local",
        embed_dims=DEFAULT_DIMS,
        embed_body={"model": model} if model else None,
    )


def test_the_int8_model_has_its_own_id_and_stays_within_the_bound_of_fp32() -> None:
    spec = embedder_spec(_token(int8.INT8_MODEL))
    fp32_spec = embedder_spec(_token(None))
    assert spec is not None and spec.local is not None and fp32_spec is not None
    # Its own shard: never the default model's id (nor the id of a token naming no model).
    assert spec.model_id == "local:all-MiniLM-L6-v2-int8"
    assert spec.model_id not in {fp32_spec.model_id, default_spec("local").model_id}

    quantized = LocalEmbedding(spec.local, DEFAULT_DIMS)  # offline: HF_HUB_OFFLINE (conftest)
    assert fp32_spec.local is not None
    fp32 = LocalEmbedding(fp32_spec.local, DEFAULT_DIMS)
    assert (quantized.runtime, fp32.runtime) == ("onnx-int8", "onnx")
    assert quantized.config.model == int8.INT8_MODEL

    want = np.array(fp32.embed_batch(TEXTS))
    for got in (
        np.array(quantized.embed_batch(TEXTS)),
        np.array([quantized.embed(t) for t in TEXTS]),
    ):
        assert got.shape == (len(TEXTS), DEFAULT_DIMS)
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        cosines = (want * got).sum(axis=1)
        assert cosines.min() >= int8.MIN_COSINE, cosines
        assert cosines.min() < 0.9999, "the int8 model gave the fp32 model's vectors"

    # Activations are quantised with one scale per pass: a short text beside a long one would
    # get the long one's coarser scale, so each text runs alone and keeps its own vector.
    encoder = local_embedder._models[(spec.local, "onnx")].onnx
    assert encoder is not None
    alone, beside = encoder.encode([PROBES[0]]), encoder.encode([PROBES[0], PROBES[-1]])
    assert float((alone[0] * beside[0]).sum()) > 0.99999


def test_outside_the_bound_it_runs_as_the_fp32_graph_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(local_embedder.default_model_path(), device="cpu")
    # No int8 graph reaches a cosine of 1 with the fp32 model on every probe.
    monkeypatch.setattr(int8, "MIN_COSINE", 1.0)
    with caplog.at_level(logging.WARNING, logger=int8.__name__):
        encoder, quantized = int8.from_sentence_transformer(model, torch)
    assert encoder is not None and not quantized
    assert "too far from the fp32 model's" in caplog.text
    with torch.inference_mode():
        want = model.encode(TEXTS, convert_to_numpy=True)
    cosines = (want * encoder.encode(TEXTS)).sum(axis=1)
    assert cosines.min() > 0.99999  # the fp32 graph: the model's own vectors
