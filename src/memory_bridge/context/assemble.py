"""Assembly of the messages forwarded upstream.

Order: system prompt (+ labelled blocks + memory block) → reference messages → session
history → the request's own messages. The request's messages are forwarded as the client
sent them (their original dicts), so nothing the proxy does not own is re-encoded.
"""

from __future__ import annotations

from typing import Any

from memory_bridge.context.template import MemoryTemplate
from memory_bridge.messages import SYSTEM_ROLES, Message
from memory_bridge.sources.base import Recall


def assemble(
    raw_messages: list[dict[str, Any]],
    messages: tuple[Message, ...],
    recalls: list[Recall],
    template: MemoryTemplate,
) -> list[dict[str, Any]] | None:
    """The messages to forward, or None when nothing is injected (forward the body as is)."""
    blocks = [b for r in recalls for b in r.system_blocks]
    memories = tuple(m for r in recalls for m in r.memories)
    if memories:
        blocks.append(template.render(memories))
    references = [r.reference.to_dict() for r in recalls if r.reference is not None]
    history = [_history_dict(m) for r in recalls for m in r.history]
    if not blocks and not references and not history:
        return None

    head = 0
    while head < len(messages) and messages[head].role in SYSTEM_ROLES:
        head += 1
    out: list[dict[str, Any]] = list(raw_messages[:head])
    if blocks:
        text = "\n\n".join(blocks)
        if out:
            out[0] = _append_text(out[0], text)
        else:
            out.append({"role": "system", "content": text})
    out.extend(references)
    out.extend(history)
    out.extend(raw_messages[head:])
    return out


def _append_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": text}]}
    joined = f"{content}\n\n{text}" if content else text
    return {**message, "content": joined}


def _history_dict(message: Message) -> dict[str, Any]:
    data = message.model_dump(exclude_none=True)
    if message.role == "assistant":
        data.setdefault("content", None)
    return data
