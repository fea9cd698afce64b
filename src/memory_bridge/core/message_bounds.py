"""What a stored message may hold: bounded text, references instead of binary payloads.

A client may send a 30 MiB message once; storing it would re-send it with every later request
of the session. So before a message is stored its text is cut to a byte limit with a visible
marker (never dropped silently), and inline images, audio and files are replaced by a short
text placeholder that says what was there. The marker carries a digest of the full text, so a
client that resends the original message is still recognised as resending it: the history
matcher compares bounded forms on both sides (`bounded(m).identity()`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from memory_bridge.core.messages import Message

# A URL kept as a reference is short; anything longer (a data: URL) is a payload.
MAX_REFERENCE_CHARS = 2048


def bounded(msg: Message, max_bytes: int) -> Message:
    """`msg` itself when it is within bounds, else a copy fit to store."""
    content = msg.content
    changes: dict[str, Any] = {}
    if isinstance(content, str):
        if _may_exceed(content, max_bytes):
            cut = truncate(content, max_bytes)
            if cut is not content:
                changes["content"] = cut
    elif isinstance(content, list):
        parts = _bounded_parts(content, max_bytes)
        if parts is not None:
            changes["content"] = parts
    if msg.tool_calls:
        calls = _bounded_calls(msg.tool_calls, max_bytes)
        if calls is not None:
            changes["tool_calls"] = calls
    if not changes:
        return msg
    return Message.model_validate({**msg.to_dict(), **changes})


def truncate(text: str, max_bytes: int) -> str:
    """`text` if it fits in `max_bytes` of UTF-8, else its head with a marker (same object
    back when nothing was cut)."""
    if not _may_exceed(text, max_bytes):
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text
    digest = hashlib.sha256(raw).hexdigest()[:16]
    head = raw[:max_bytes].decode("utf-8", "ignore")  # never half a character
    return (
        f"{head}\n[truncated by MemoryBridge: {len(head.encode())} of {len(raw)} bytes kept, "
        f"sha256 {digest}]"
    )


def _may_exceed(text: str, max_bytes: int) -> bool:
    # A character is at most 4 bytes of UTF-8: most texts are cleared without encoding them.
    return len(text) * 4 > max_bytes


def _bounded_parts(parts: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] = []
    changed = False
    for part in parts:
        kept = _bounded_part(part, max_bytes)
        changed = changed or kept is not part
        out.append(kept)
    return out if changed else None


def _bounded_part(part: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        text = truncate(part["text"], max_bytes)
        return part if text is part["text"] else {**part, "text": text}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        if isinstance(url, str) and len(url) <= MAX_REFERENCE_CHARS and not url.startswith("data:"):
            return part
        return _placeholder("image", url)
    if kind in ("input_audio", "file"):
        return _placeholder(kind, part.get(kind))
    if len(json.dumps(part, ensure_ascii=False)) > max_bytes:  # an unknown kind of payload
        return _placeholder(str(kind), part)
    return part


def _placeholder(kind: str, payload: Any) -> dict[str, Any]:
    size = len(json.dumps(payload, ensure_ascii=False)) if payload is not None else 0
    name = payload.get("filename") if isinstance(payload, dict) else None
    label = f"{kind} {name!r}" if isinstance(name, str) else kind
    text = f"[{label} of about {size} bytes, not stored by MemoryBridge]"
    return {"type": "text", "text": text}


def _bounded_calls(calls: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] = []
    changed = False
    for call in calls:
        function = call.get("function")
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(function, dict) and isinstance(arguments, str):
            cut = truncate(arguments, max_bytes)
            if cut is not arguments:
                # Still JSON, so an upstream that parses arguments accepts the history.
                call = {
                    **call,
                    "function": {**function, "arguments": json.dumps({"truncated": cut})},
                }
                changed = True
        out.append(call)
    return out if changed else None
