"""The fake upstream's chat completions: a `Scenario` as a ``chat.completion`` object or as its
``chat.completion.chunk`` stream (content and ``reasoning_content`` in word-sized deltas, tool
calls OpenAI-style, a usage chunk when ``stream_options.include_usage`` asks for one).

`FakeUpstream` serves them; this module only builds them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.fakes.upstream.scenario import (
    Scenario,
    call_id,
    content_of,
    deltas,
    fragments,
    generated_tokens,
)

SYSTEM_FINGERPRINT = "fp_fake"


def sse(payload: Mapping[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def usage(scenario: Scenario, payload: Mapping[str, Any]) -> dict[str, int]:
    if scenario.usage is not None:
        return dict(scenario.usage)
    prompt = sum(
        len(m["content"].split())
        for m in payload.get("messages") or []
        if isinstance(m, dict) and isinstance(m.get("content"), str)
    )
    completion = generated_tokens(scenario)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def finish_reason(scenario: Scenario) -> str:
    if scenario.finish_reason is not None:
        return scenario.finish_reason
    return "tool_calls" if scenario.tool_calls else "stop"


def _message(scenario: Scenario) -> dict[str, Any]:
    content = content_of(scenario)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if content is None else "".join(content),
        "refusal": None,
        "annotations": [],
    }
    if scenario.reasoning is not None:
        message["reasoning_content"] = "".join(scenario.reasoning)
    if scenario.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id(call, i),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for i, call in enumerate(scenario.tool_calls)
        ]
    return message


def _head(kind: str, completion_id: str, created: int, model: str) -> dict[str, Any]:
    return {"id": completion_id, "object": kind, "created": created, "model": model}


def completion(
    scenario: Scenario, payload: Mapping[str, Any], completion_id: str, created: int, model: str
) -> dict[str, Any]:
    """The whole ``chat.completion``."""
    choice = {
        "index": 0,
        "message": _message(scenario),
        "logprobs": None,
        "finish_reason": finish_reason(scenario),
    }
    return {
        **_head("chat.completion", completion_id, created, model),
        "choices": [choice],
        "usage": usage(scenario, payload),
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }


def chunks(
    scenario: Scenario, payload: Mapping[str, Any], completion_id: str, created: int, model: str
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` events of the stream, without ``[DONE]``."""
    options = payload.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    base = _head("chat.completion.chunk", completion_id, created, model)
    base["system_fingerprint"] = SYSTEM_FINGERPRINT

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice], **({"usage": None} if include_usage else {})}

    content = deltas(content_of(scenario))
    reasoning = deltas(scenario.reasoning)
    events: list[dict[str, Any]] = []
    if content or reasoning or not scenario.tool_calls:
        events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
    events.extend(chunk({"reasoning_content": piece}) for piece in reasoning)
    events.extend(chunk({"content": piece}) for piece in content)
    for index, call in enumerate(scenario.tool_calls):
        function = {"name": call.name, "arguments": ""}
        first = {"index": index, "id": call_id(call, index), "type": "function"}
        first_delta: dict[str, Any] = {"tool_calls": [{**first, "function": function}]}
        if not events:  # tool-call-only replies carry the role in the first tool delta
            first_delta = {"role": "assistant", "content": None, **first_delta}
        events.append(chunk(first_delta))
        events.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            for fragment in fragments(call.arguments_json())
        )
    events.append(chunk({}, finish_reason(scenario)))
    if include_usage:
        events.append({**base, "choices": [], "usage": usage(scenario, payload)})
    return events
