"""The fake upstream's embeddings: deterministic vectors and the ``/v1/embeddings`` list object.

``fake_embedding`` (hash-based: unrelated texts are unrelated vectors) unless the request's
``model`` starts with ``bow``, then ``bow_embedding``, a bag-of-words vector whose cosine
similarity grows with shared words, so semantic search behaves plausibly.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
from collections.abc import Mapping
from typing import Any


def _unit_float32(vector: list[float]) -> list[float]:
    """Unit length, and exact float32 values, so the "float" and "base64" encodings decode to
    the same numbers."""
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    packed = struct.pack(f"<{len(vector)}f", *(v / norm for v in vector))
    return list(struct.unpack(f"<{len(vector)}f", packed))


def fake_embedding(text: str, dimensions: int) -> list[float]:
    """Deterministic unit-length vector for ``text``."""
    raw: list[float] = []
    block = 0
    while len(raw) < dimensions:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        raw.extend((byte - 127.5) / 127.5 for byte in digest)
        block += 1
    return _unit_float32(raw[:dimensions])


def bow_embedding(text: str, dimensions: int) -> list[float]:
    """Bag-of-words vector: each lower-cased word (punctuation stripped) adds 1 to a
    hash-chosen dimension; unit length. Texts sharing words have a high cosine similarity."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimensions] += 1.0
    return _unit_float32(vector)


def _texts(raw_input: Any) -> list[str]:
    if isinstance(raw_input, str) or (
        isinstance(raw_input, list) and raw_input and isinstance(raw_input[0], int)
    ):
        raw_input = [raw_input]  # a single string or a single token list
    return [item if isinstance(item, str) else json.dumps(item) for item in raw_input]


def embedding_list(payload: Mapping[str, Any], default_dimensions: int) -> dict[str, Any]:
    """The answer to an embeddings request whose ``input`` is present."""
    texts = _texts(payload["input"])
    dimensions = int(payload.get("dimensions") or default_dimensions)
    embed = bow_embedding if str(payload.get("model", "")).startswith("bow") else fake_embedding
    data = []
    for index, text in enumerate(texts):
        vector = embed(text, dimensions)
        embedding: Any = vector
        if payload.get("encoding_format") == "base64":
            embedding = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(len(t.split()) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": payload.get("model", "text-embedding-3-small"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
