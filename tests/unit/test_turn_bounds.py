"""A turn's stored messages are bounded (the newest kept after one marker, never starting with
a tool result whose call was cut), and a large request body is parsed off the event loop."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from memory_bridge.chat.formats import CHAT
from memory_bridge.chat.request_reader import RequestReader
from memory_bridge.core.messages import Message
from memory_bridge.events.recorder import at_most


def _msgs(*roles: str) -> list[Message]:
    return [Message(role=role, content=f"{role} {n}") for n, role in enumerate(roles)]  # type: ignore[arg-type]


def test_a_short_turn_is_kept_whole() -> None:
    messages = _msgs("user", "assistant")
    assert at_most(messages, 2) is messages


def test_a_long_turn_keeps_the_newest_after_a_marker() -> None:
    kept = at_most(_msgs("user", "assistant", "user", "assistant", "user"), 3)
    assert [m.content for m in kept[1:]] == ["assistant 3", "user 4"]
    assert "3 earlier messages" in str(kept[0].content) and kept[0].role == "assistant"


def test_a_kept_part_never_starts_with_an_orphaned_tool_result() -> None:
    kept = at_most(_msgs("user", "assistant", "tool", "tool", "assistant"), 4)
    assert [m.role for m in kept] == ["assistant", "assistant"]
    assert "4 earlier messages" in str(kept[0].content)


def _reader(thread_bytes: int) -> RequestReader:
    return RequestReader(max_messages=3, thread_bytes=thread_bytes)


def test_a_large_body_is_parsed_in_another_thread_and_a_small_one_inline() -> None:
    seen: list[int] = []
    parse = CHAT.parse_body

    def spy(raw: bytes) -> dict[str, Any]:
        seen.append(threading.get_ident())
        return parse(raw)

    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 100}]})
    wire = CHAT.__class__(**{**{f: getattr(CHAT, f) for f in CHAT.__slots__}, "parse_body": spy})

    async def both() -> int:
        await _reader(50).parse(wire, raw.encode())  # larger than 50 bytes
        await _reader(10_000).parse(wire, raw.encode())
        return threading.get_ident()

    loop_thread = asyncio.run(both())
    assert seen[0] != loop_thread and seen[1] == loop_thread
