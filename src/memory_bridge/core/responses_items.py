"""The Responses API's input and output items, and the one message model: both ways.

Session history stores chat-format `Message`s, so one session can mix `/v1/chat/completions`
and `/v1/responses` calls. Items are converted to messages at the edge (to recall and to
store a turn) and stored messages back to items (to inject history); docs/decisions.md has
the mapping. What the proxy does not need to understand is not validated here: it reaches the
upstream untouched, and the upstream judges it.

Both directions share `AssistantRun`, so an assistant reply captured from a response's
`output` and the same items resent by a stateless client convert to the same message, and the
history matcher recognises the resend (`Message.identity`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memory_bridge.core.messages import Message, MessageError

MESSAGE = "message"
FUNCTION_CALL = "function_call"
FUNCTION_CALL_OUTPUT = "function_call_output"
_ROLES = ("user", "assistant", "system", "developer")
# Texts of one assistant run (several message items in a row) are joined with a blank line.
_TEXT_JOIN = "\n\n"


class AssistantRun:
    """Consecutive assistant items (messages and function calls) becoming ONE assistant message,
    as a chat completion's reply is one message with its content and tool calls."""

    __slots__ = ("calls", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self.texts or self.calls)

    def add_call(self, call_id: str, name: str, arguments: str) -> None:
        self.calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    @property
    def content(self) -> str | None:
        return _TEXT_JOIN.join(self.texts) or None

    def message(self) -> Message:
        data: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            data["tool_calls"] = self.calls
        return Message.model_validate(data)

    def flush_into(self, out: list[Message]) -> None:
        if self:
            out.append(self.message())
            self.texts = []
            self.calls = []


# --- items → messages ---------------------------------------------------------------------


def input_messages(raw: object) -> tuple[Message, ...]:
    """The request's `input` as messages; `MessageError` naming the item when the proxy cannot
    read what it needs (a role, a text, a function call's ids)."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (Message(role="user", content=raw),)
    if not isinstance(raw, list):
        raise MessageError("'input' must be a string or an array of items")
    out: list[Message] = []
    run = AssistantRun()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise MessageError(f"input[{i}] must be an object")
        kind = item.get("type", MESSAGE)
        if kind == MESSAGE:
            role = item.get("role")
            if role not in _ROLES:
                raise MessageError(f"input[{i}].role: must be one of {', '.join(_ROLES)}")
            if role == "assistant":
                text = _assistant_text(i, item.get("content"))
                if text is not None:
                    run.texts.append(text)
                continue
            message = Message.model_validate({"role": role, "content": _content(i, item)})
        elif kind == FUNCTION_CALL:
            run.add_call(*(_string(i, item, key) for key in ("call_id", "name", "arguments")))
            continue
        elif kind == FUNCTION_CALL_OUTPUT:
            call_id = _string(i, item, "call_id")
            output = _output_text(i, item.get("output"))
            message = Message(role="tool", content=output, tool_call_id=call_id)
        elif isinstance(kind, str):
            # Reasoning items, item references, built-in tools' calls and outputs: the
            # upstream's own state, never part of the stored conversation.
            continue
        else:
            raise MessageError(f"input[{i}].type: must be a string")
        run.flush_into(out)
        out.append(message)
    run.flush_into(out)
    return tuple(out)


def output_run(output: Iterable[object]) -> AssistantRun:
    """A response's `output` items as one assistant run (reasoning and built-in tools left out).

    Lenient, unlike `input_messages`: what an upstream answered must never break the client's
    response; an unreadable item is simply not remembered.
    """
    run = AssistantRun()
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", MESSAGE)
        if kind == MESSAGE and item.get("role", "assistant") == "assistant":
            try:
                text = _assistant_text(0, item.get("content"))
            except MessageError:
                continue
            if text is not None:
                run.texts.append(text)
        elif kind == FUNCTION_CALL:
            call_id, name, arguments = (item.get(k) for k in ("call_id", "name", "arguments"))
            if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
                run.add_call(call_id, name, arguments)
    return run


def _string(i: int, item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise MessageError(f"input[{i}].{key}: must be a string")
    return value


def _content(i: int, item: dict[str, Any]) -> str | list[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessageError(f"input[{i}].content: must be a string or an array of parts")
    return [_chat_part(i, j, part) for j, part in enumerate(content)]


def _part_type(i: int, j: int, part: object) -> tuple[dict[str, Any], str]:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise MessageError(f"input[{i}].content[{j}]: must be an object with a string 'type'")
    return part, part["type"]


def _chat_part(i: int, j: int, raw: object) -> dict[str, Any]:
    """An input content part in the chat format, as session history stores it."""
    part, kind = _part_type(i, j, raw)
    if kind == "input_text":
        text = part.get("text")
        if not isinstance(text, str):
            raise MessageError(f"input[{i}].content[{j}].text: must be a string")
        return {"type": "text", "text": text}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        keys = ("file_id", "file_data", "filename")
        file = {k: part[k] for k in keys if isinstance(part.get(k), str)}
        if "file_id" in file or "file_data" in file:
            return {"type": "file", "file": file}
    return {"type": "text", "text": _note(kind, part)}


def _note(kind: str, part: dict[str, Any]) -> str:
    """What stands for a part the chat format cannot carry (an image known only by an upstream
    file id, a file by URL) or the proxy does not know: a note of what was there."""
    keys = ("file_id", "file_url", "filename")
    ref = next((part[k] for k in keys if isinstance(part.get(k), str)), None)
    label = f"{kind} {ref!r}" if ref else kind
    return f"[{label}, not stored by MemoryBridge]"


def _assistant_text(i: int, content: object) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessageError(f"input[{i}].content: must be a string or an array of parts")
    texts = []
    for j, raw in enumerate(content):
        part, kind = _part_type(i, j, raw)
        if kind in ("output_text", "input_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise MessageError(f"input[{i}].content[{j}].text: must be a string")
            texts.append(text)
        # A refusal is not remembered, as a chat completion's `refusal` is not.
    return "".join(texts) if texts else None


def _output_text(i: int, output: object) -> str:
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        raise MessageError(f"input[{i}].output: must be a string or an array of parts")
    texts = []
    for j, raw in enumerate(output):
        part, kind = _part_type(i, j, raw)
        text = part.get("text")
        texts.append(text if kind == "input_text" and isinstance(text, str) else _note(kind, part))
    return "\n".join(texts)


# --- messages → items ----------------------------------------------------------------------


def history_items(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Stored messages as Responses input items (to inject session history)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "user":
            items.append({"type": MESSAGE, "role": "user", "content": _input_content(message)})
        elif message.role == "assistant":
            text = message.text()
            if text:
                items.append({"type": MESSAGE, "role": "assistant", "content": text})
            for call in message.tool_calls or ():
                function = call.get("function") or {}
                items.append(
                    {
                        "type": FUNCTION_CALL,
                        "call_id": str(call.get("id") or ""),
                        "name": str(function.get("name") or ""),
                        "arguments": str(function.get("arguments") or ""),
                    }
                )
        elif message.role == "tool":
            output = {"type": FUNCTION_CALL_OUTPUT, "call_id": message.tool_call_id or ""}
            items.append({**output, "output": message.text()})
        # A legacy `function` message has no call id to answer: it cannot be an item.
    return items


def user_item(text: str) -> dict[str, Any]:
    return {"type": MESSAGE, "role": "user", "content": text}


def _input_content(message: Message) -> str | list[dict[str, Any]]:
    content = message.content
    if not isinstance(content, list):
        return content or ""
    return [_input_part(part) for part in content]


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "image_url" and isinstance(part.get("image_url"), dict):
        image = part["image_url"]
        detail = image.get("detail") if isinstance(image.get("detail"), str) else "auto"
        return {"type": "input_image", "image_url": image.get("url"), "detail": detail}
    if kind == "file" and isinstance(part.get("file"), dict):
        return {"type": "input_file", **part["file"]}
    text = part.get("text")
    return {"type": "input_text", "text": text if isinstance(text, str) else f"[{kind}]"}
