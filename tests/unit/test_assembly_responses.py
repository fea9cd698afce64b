"""Placement for the Responses API: the same rule as chat completions, in items and
`instructions`."""

from __future__ import annotations

import copy
import json
from typing import Any

from memory_bridge.context.assemble import assemble, assemble_responses
from memory_bridge.context.template import MemoryTemplate
from memory_bridge.core.messages import Message, parse_messages
from memory_bridge.sources.base import Recall

TEMPLATE = MemoryTemplate("Known:\n{memories}")
CURATED = Recall(source="curated", system_blocks=("CURATED",))
HISTORY = Recall(
    source="history",
    history=(Message(role="user", content="before"), Message(role="assistant", content="ok")),
)


def memories(*texts: str) -> Recall:
    return Recall(source="longterm", memories=texts)


def test_nothing_to_inject_means_forward_as_is() -> None:
    assert assemble_responses({"input": "hi"}, [Recall(source="x")], TEMPLATE) is None


def test_only_instructions_and_input_change() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "instructions": "Be brief.",
        "input": "now",
        "tools": [{"type": "function", "name": "f"}],
        "store": False,
        "x-vendor": {"a": 1},
    }
    before = copy.deepcopy(body)
    out = assemble_responses(body, [CURATED, memories("likes tea"), HISTORY], TEMPLATE)
    assert out is not None
    assert list(out) == list(body)  # every field keeps its place
    assert {k: v for k, v in out.items() if k not in ("instructions", "input")} == {
        k: v for k, v in body.items() if k not in ("instructions", "input")
    }
    assert out["instructions"] == "Be brief.\n\nCURATED"
    assert out["input"] == [
        {"type": "message", "role": "user", "content": "before"},
        {"type": "message", "role": "assistant", "content": "ok"},
        {"type": "message", "role": "user", "content": "Known:\n- likes tea"},
        {"type": "message", "role": "user", "content": "now"},
    ]
    assert body == before  # the client's body is not mutated


def test_instructions_are_byte_stable_whatever_is_recalled() -> None:
    seen = set()
    for fact in ("likes tea", "lives in Lyon", "has a cat"):
        reference = Message(role="user", content=f"[Gateway] {fact}")
        recalls = [CURATED, memories(fact), Recall(source="gateway", reference=reference)]
        out = assemble_responses({"input": "q"}, recalls, TEMPLATE)
        assert out is not None
        seen.add(out["instructions"])
    assert seen == {"CURATED"}


def test_the_dynamic_block_goes_right_before_the_latest_user_item() -> None:
    items: list[Any] = [
        {"role": "developer", "content": "D"},
        {"role": "user", "content": "first"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "x"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "latest"}]},
        {"type": "function_call", "call_id": "d", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "d", "output": "y"},
    ]
    out = assemble_responses({"input": items}, [memories("fact"), HISTORY], TEMPLATE)
    assert out is not None
    block = {"type": "message", "role": "user", "content": "Known:\n- fact"}
    history = [
        {"type": "message", "role": "user", "content": "before"},
        {"type": "message", "role": "assistant", "content": "ok"},
    ]
    assert out["input"] == [items[0], *history, *items[1:5], block, *items[5:]]
    assert "instructions" not in out  # nothing stable to add


def test_without_a_user_item_the_block_goes_before_the_history() -> None:
    items: list[Any] = [{"type": "function_call_output", "call_id": "c", "output": "x"}]
    out = assemble_responses({"input": items}, [memories("fact"), HISTORY], TEMPLATE)
    assert out is not None
    assert out["input"] == [
        {"type": "message", "role": "user", "content": "Known:\n- fact"},
        {"type": "message", "role": "user", "content": "before"},
        {"type": "message", "role": "assistant", "content": "ok"},
        *items,
    ]


def test_one_rule_for_both_formats() -> None:
    """The same recalls land in the same places in a chat completion and a Responses body."""
    recalls = [CURATED, memories("fact"), HISTORY]
    raw: list[dict[str, Any]] = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "q"},
    ]
    chat = assemble(raw, parse_messages(raw), recalls, TEMPLATE)
    responses = assemble_responses(
        {"instructions": "S", "input": [{"role": "user", "content": "q"}]}, recalls, TEMPLATE
    )
    assert chat is not None and responses is not None
    assert chat[0]["content"] == responses["instructions"]
    as_chat = [{"role": i["role"], "content": i["content"]} for i in responses["input"]]
    assert json.dumps(chat[1:]) == json.dumps(as_chat)


def test_reference_first_puts_the_dynamic_block_before_the_history_in_both_formats() -> None:
    recalls = [CURATED, memories("likes tea"), HISTORY]
    raw: list[dict[str, Any]] = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "now"},
    ]
    dynamic = {"role": "user", "content": "Known:\n- likes tea"}
    history = [{"role": "user", "content": "before"}, {"role": "assistant", "content": "ok"}]
    chat = assemble(raw, parse_messages(raw), recalls, TEMPLATE, "reference_first")
    assert chat == [{"role": "system", "content": "S\n\nCURATED"}, dynamic, *history, *raw[1:]]
    stable = assemble(raw, parse_messages(raw), recalls, TEMPLATE, "stable")
    assert stable == [chat[0], *history, *raw[1:3], dynamic, raw[3]]

    body = assemble_responses({"input": "now"}, recalls, TEMPLATE, "reference_first")
    assert body is not None and body["instructions"] == "CURATED"
    roles_texts = [(i["role"], json.dumps(i["content"])) for i in body["input"]]
    assert [r for r, _ in roles_texts] == ["user", "user", "assistant", "user"]
    assert "likes tea" in roles_texts[0][1] and "before" in roles_texts[1][1]
    assert "now" in roles_texts[3][1]
