"""One forwarded prompt against the previous turn's: the share that is the same prefix, where
the prefix breaks, and the ceiling (messages sent byte-identical before)."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import Any

from bench.placement.prompts import GATEWAY_MARK, MEMORY_MARK, TARGET, TARGET_FROM_TURN


def encode(value: Any) -> bytes:
    """The serialization the shares are measured on (see the module docstring)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common byte prefix of `a` and `b`."""
    limit = min(len(a), len(b))
    step = 4096
    i = 0
    while i < limit and a[i : i + step] == b[i : i + step]:  # whole blocks first
        i += step
    i = min(i, limit)
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def kind(messages: list[dict[str, Any]], index: int) -> str:
    """What a forwarded message is: system prompt, history, recall block or latest user."""
    message = messages[index]
    if index == len(messages) - 1:
        return "latest user message"
    if message.get("role") in ("system", "developer"):
        return "system prompt"
    text = text_of(message)
    if message.get("role") == "user" and (MEMORY_MARK in text or GATEWAY_MARK in text):
        return "recall block"
    return "history"


def message_at(messages: list[dict[str, Any]], offset: int) -> int | None:
    """Index of the message whose bytes hold `offset` in `encode(messages)`; None past the end."""
    position = 1  # "["
    for index, message in enumerate(messages):
        position += len(encode(message)) + 1  # the message and its "," (or the closing "]")
        if offset < position:
            return index
    return None


def measure(
    messages: list[dict[str, Any]],
    body: bytes,
    previous: tuple[list[dict[str, Any]], bytes] | None,
) -> dict[str, Any]:
    """The figures of one turn's forwarded prompt against the previous turn's."""
    prompt = encode(messages)
    figures: dict[str, Any] = {
        "messages": len(messages),
        "bytes": len(prompt),
        "kinds": dict(Counter(kind(messages, i) for i in range(len(messages)))),
        "recall_block_bytes": sum(
            len(encode(m)) for i, m in enumerate(messages) if kind(messages, i) == "recall block"
        ),
    }
    if previous is None:
        return figures | {"prefix_bytes": None, "share": None, "breaks_in": None}
    before, before_body = previous
    prefix = common_prefix(prompt, encode(before))
    index = message_at(messages, prefix)
    seen = Counter(encode(m) for m in before)
    carried = 0
    for message in messages:
        data = encode(message)
        if seen[data] > 0:
            seen[data] -= 1
            carried += len(data)
    return figures | {
        "prefix_bytes": prefix,
        "share": round(prefix / len(prompt), 4),
        "breaks_in": None if index is None else f"{kind(messages, index)} (#{index})",
        "carried_share": round(carried / len(prompt), 4),
        "body_bytes": len(body),
        "body_share": round(common_prefix(body, before_body) / len(body), 4),
    }


def summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    late = [t["share"] for t in turns if t["turn"] >= TARGET_FROM_TURN and t["share"] is not None]
    if not late:
        return {"from_turn": TARGET_FROM_TURN, "min": None, "median": None, "target_met": None}
    return {
        "from_turn": TARGET_FROM_TURN,
        "min": min(late),
        "median": round(statistics.median(late), 4),
        "target": TARGET,
        "target_met": min(late) >= TARGET,
    }
