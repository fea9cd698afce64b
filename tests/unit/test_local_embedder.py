"""The local embedder with the packaged MiniLM: a short call (one torch thread, maybe from the
recent-vector cache) gives the vectors a batch on torch's default threads gives, as fresh
lists, and the cache stays bounded."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from memory_bridge.embedding import local as local_embedder
from memory_bridge.embedding import onnx_encoder
from memory_bridge.embedding.local import (
    DEFAULT_DIMS,
    RECENT,
    SHORT_CALL,
    LocalEmbedding,
    LocalModel,
)

pytestmark = pytest.mark.skipif(
    not local_embedder.local_extra_installed(), reason="needs the local extra"
)


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_short_calls_match_a_batch_and_the_cache_is_bounded() -> None:
    embedding = LocalEmbedding(LocalModel(path=""), DEFAULT_DIMS)
    texts = [f"When did Caroline visit museum number {i}?" for i in range(SHORT_CALL + 1)]
    batch = embedding.embed_batch(texts)  # more than SHORT_CALL: torch's default threads
    first = embedding.embed(texts[0])
    assert _cosine(first, batch[0]) > 0.99999
    for _ in range(2):  # the caller owns what it got: the cached vector is not touched
        cached = embedding.embed(texts[0])
        assert cached == first
        cached[0] += 1.0
    assert embedding.embed(texts[1]) != first  # keyed by the text

    for i in range(RECENT + 5):
        embedding.embed(f"a distinct question {i}")
    loaded = local_embedder._models[(LocalModel(path=""), "onnx")]
    assert len(loaded.recent) == RECENT
    assert _cosine(embedding.embed(texts[0]), batch[0]) > 0.99999  # evicted, recomputed


def test_onnx_runtime_gives_torchs_vectors_and_shares_concurrent_queries() -> None:
    spec = LocalModel(path="")
    local_embedder.use_runtime("torch")
    try:
        on_torch = LocalEmbedding(spec, DEFAULT_DIMS)
    finally:
        local_embedder.use_runtime("onnx")
    on_onnx = LocalEmbedding(spec, DEFAULT_DIMS)
    assert (on_torch.runtime, on_onnx.runtime) == ("torch", "onnx")
    texts = [f"  What did Melanie paint in week {i}? café 🎨 " * (1 + i % 4) for i in range(12)]
    want = on_torch.embed_batch(texts)
    assert all(
        _cosine(a, b) > 0.99999 for a, b in zip(want, on_onnx.embed_batch(texts), strict=True)
    )

    # Concurrent callers: each gets its own text's vector (tokenising is serialised, forward
    # passes are not), and the same text asked for at once is one shared result.
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(on_onnx.embed, texts + texts))
    for n, vector in enumerate(got):
        assert _cosine(vector, want[n % len(texts)]) > 0.99999
    loaded = local_embedder._models[(spec, "onnx")]
    assert not loaded.pending

    # A batch with remembered texts among new ones (an indexing job's user message was the
    # recall query): every vector in its place.
    fresh = ["a text never embedded before", "  another new one  "]
    mixed = [fresh[0], texts[3], fresh[1], texts[5] + "  "]
    expected = on_torch.embed_batch(mixed)
    for a, b in zip(on_onnx.embed_batch(mixed), expected, strict=True):
        assert _cosine(a, b) > 0.99999


def test_a_pipeline_the_encoder_does_not_reproduce_stays_on_torch() -> None:
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    path = local_embedder.default_model_path()
    plain = st.SentenceTransformer(path, device="cpu")
    transformer = plain[0]
    cls_pooled = st.SentenceTransformer(
        modules=[transformer, type(plain[1])(DEFAULT_DIMS, pooling_mode="cls")], device="cpu"
    )
    assert onnx_encoder.from_sentence_transformer(cls_pooled, torch) is None
    # A graph whose vectors differ from the model's is refused by the check: here the same
    # graph without the model's final normalisation.
    ort = pytest.importorskip("onnxruntime")
    graph, names = onnx_encoder.export_graph(plain, torch)
    unnormalised = onnx_encoder.session_encoder(ort, graph, plain, names, normalize=False)
    assert not onnx_encoder._same_vectors(unnormalised, plain, torch)
    normalised = onnx_encoder.session_encoder(ort, graph, plain, names, normalize=True)
    assert onnx_encoder._same_vectors(normalised, plain, torch)


def test_the_packaged_model_reads_the_first_128_word_pieces_of_a_text() -> None:
    embedding = LocalEmbedding(LocalModel(path=""), DEFAULT_DIMS)
    # 160 common words, one word piece each: past 128, within the 256 of sentence-transformers'
    # default, which would read the tail.
    head = " ".join(["the river runs past the old mill"] * 20 + ["and"] * 20)
    same_head = embedding.embed(head + " but a tail about quantum chromodynamics is never read")
    assert _cosine(same_head, embedding.embed(head)) > 0.99999
    short = "When did Caroline go to the support group?"
    assert _cosine(embedding.embed(short), embedding.embed(short + " And then?")) < 0.999
