"""Mem0's memory-LLM calls: recognising its fact-extraction request and answering it.

Mem0 asks the upstream (system prompt "Memory Extractor", ``response_format`` ``json_object``)
for the facts in the "## New Messages" section of its prompt. The fake answers that apart from
the scripted queue, by ``FakeUpstream.memory_responder(user_texts)``; the default,
``extract_user_facts``, makes one memory per user line, verbatim, so tests know exactly what
gets stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.fakes.upstream.scenario import Scenario


def is_memory_extraction(payload: Any) -> bool:
    """Is this chat completion Mem0's memory-extraction call?"""
    if not isinstance(payload, dict):
        return False
    messages = payload.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    fmt = payload.get("response_format")
    return (
        first.get("role") == "system"
        and "Memory Extractor" in str(first.get("content"))
        and isinstance(fmt, dict)
        and fmt.get("type") == "json_object"
    )


def new_user_texts(payload: Mapping[str, Any]) -> list[str]:
    """The user lines of the extraction prompt's "## New Messages" section."""
    prompt = str(payload["messages"][-1].get("content") or "")
    section = prompt.split("## New Messages\n", 1)[-1].split("\n\n## ", 1)[0]
    return [line[len("user: ") :] for line in section.splitlines() if line.startswith("user: ")]


def extract_user_facts(user_texts: list[str]) -> Scenario:
    """The default extraction answer: one memory per user text, verbatim."""
    memories = [
        {"id": str(i), "text": text, "attributed_to": "user"}
        for i, text in enumerate(t.strip() for t in user_texts)
        if text
    ]
    return Scenario(content=json.dumps({"memory": memories}, ensure_ascii=False))
