"""The fake upstream's Responses API: response objects and their event streams from a `Scenario`.

Shapes follow OpenAI's Responses API: a response object (`object: "response"`, `status`,
`output` items: `reasoning`, `message` with `output_text` parts, `function_call`), and a stream
of `event:` + `data:` events, each with its `type` and a `sequence_number` counting from 0:

    response.created, response.in_progress,
    per output item: response.output_item.added, its deltas
      (reasoning: response.reasoning_summary_text.delta; message: response.content_part.added,
       response.output_text.delta…, response.output_text.done, response.content_part.done;
       function call: response.function_call_arguments.delta…, ….done),
      response.output_item.done,
    then response.completed | response.incomplete | response.failed (with an empty output,
    after the events of what the model generated before it failed).

`FakeUpstream` serves them; this module only builds them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.fakes.upstream.scenario import (
    DEFAULT_MODEL,
    Scenario,
    call_id,
    content_of,
    deltas,
    fragments,
    generated_tokens,
)


def _words(value: Any) -> int:
    """A rough token count of everything textual in `value`."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(v) for k, v in value.items() if k in ("content", "text", "output"))
    return 0


def output_items(scenario: Scenario, serial: int) -> list[dict[str, Any]]:
    """The finished output items of a scenario: reasoning, then the message, then calls."""
    items: list[dict[str, Any]] = []
    if scenario.reasoning is not None:
        summary = [{"type": "summary_text", "text": "".join(scenario.reasoning)}]
        items.append({"id": f"rs_fake{serial}", "type": "reasoning", "summary": summary})
    content = content_of(scenario)
    if content is not None:
        part = {"type": "output_text", "text": "".join(content), "annotations": [], "logprobs": []}
        items.append(
            {
                "id": f"msg_fake{serial}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for index, call in enumerate(scenario.tool_calls):
        items.append(
            {
                "id": f"fc_fake{serial}_{index}",
                "type": "function_call",
                "status": "completed",
                "call_id": call_id(call, index),
                "name": call.name,
                "arguments": call.arguments_json(),
            }
        )
    return items


def usage(scenario: Scenario, payload: Mapping[str, Any]) -> dict[str, Any]:
    if scenario.usage is not None:
        return dict(scenario.usage)
    prompt = _words(payload.get("input")) + _words(payload.get("instructions"))
    reasoning = len(deltas(scenario.reasoning))
    completion = generated_tokens(scenario)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def response_object(
    scenario: Scenario,
    payload: Mapping[str, Any],
    response_id: str,
    created: int,
    status: str,
    output: list[dict[str, Any]],
) -> dict[str, Any]:
    final = status in ("completed", "incomplete", "failed")
    error = None
    if status == "failed":
        error = {"code": "server_error", "message": "The fake model failed."}
    details = {"reason": "max_output_tokens"} if status == "incomplete" else None
    echoed = {"input": payload.get("input")} if scenario.echo_input else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": details,
        "instructions": payload.get("instructions"),
        "max_output_tokens": payload.get("max_output_tokens"),
        "model": str(payload.get("model") or DEFAULT_MODEL),
        "output": output,
        "parallel_tool_calls": payload.get("parallel_tool_calls", True),
        "previous_response_id": payload.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": payload.get("store", True),
        "temperature": payload.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": payload.get("tool_choice", "auto"),
        "tools": payload.get("tools", []),
        "top_p": payload.get("top_p", 1.0),
        "truncation": payload.get("truncation", "disabled"),
        "usage": usage(scenario, payload) if final else None,
        "user": payload.get("user"),
        "metadata": payload.get("metadata") or {},
        **echoed,
    }


def final_status(scenario: Scenario) -> str:
    return scenario.response_status or "completed"


def events(
    scenario: Scenario, payload: Mapping[str, Any], response_id: str, created: int, serial: int
) -> list[bytes]:
    """The scenario's answer as Responses stream events, one `bytes` per event."""
    out: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        data = {"type": kind, **fields, "sequence_number": len(out)}
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        out.append(f"event: {kind}\ndata: {text}\n\n".encode())

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return response_object(scenario, payload, response_id, created, status, output)

    emit("response.created", response=response("in_progress", []))
    emit("response.in_progress", response=response("in_progress", []))
    status = final_status(scenario)
    items = output_items(scenario, serial)
    for index, item in enumerate(items):
        _item_events(emit, scenario, index, item)
    if status == "failed":  # after what it generated before it failed
        emit("response.failed", response=response("failed", []))
        return out
    if scenario.omit_done:
        return out
    final = response(status, [] if scenario.bare_completed else items)
    emit(f"response.{status}", response=final)
    return out


def _item_events(emit: Any, scenario: Scenario, index: int, item: dict[str, Any]) -> None:
    at = {"output_index": index}
    kind = item["type"]
    if kind == "reasoning":
        emit("response.output_item.added", **at, item={**item, "summary": []})
        for piece in deltas(scenario.reasoning):
            where = {"item_id": item["id"], **at, "summary_index": 0}
            emit("response.reasoning_summary_text.delta", **where, delta=piece)
    elif kind == "message":
        emit(
            "response.output_item.added",
            **at,
            item={**item, "status": "in_progress", "content": []},
        )
        where = {"item_id": item["id"], **at, "content_index": 0}
        empty = {"type": "output_text", "text": "", "annotations": []}
        emit("response.content_part.added", **where, part=empty)
        for piece in deltas(content_of(scenario)):
            emit("response.output_text.delta", **where, delta=piece, logprobs=[])
        part = item["content"][0]
        emit("response.output_text.done", **where, text=part["text"], logprobs=[])
        emit("response.content_part.done", **where, part=part)
    else:
        emit(
            "response.output_item.added",
            **at,
            item={**item, "status": "in_progress", "arguments": ""},
        )
        for piece in fragments(item["arguments"]):
            emit("response.function_call_arguments.delta", item_id=item["id"], **at, delta=piece)
        done = {"name": item["name"], "arguments": item["arguments"]}
        emit("response.function_call_arguments.done", item_id=item["id"], **at, **done)
    emit("response.output_item.done", **at, item=item)


def input_items(payload: Mapping[str, Any], response_id: str) -> list[dict[str, Any]]:
    """The request's input as the `input_items` list shows it: each item with an id, and each
    message's content as parts, as OpenAI lists them."""
    raw = payload.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    out = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        listed = {"id": f"in_{response_id}_{i}", **item}
        if item.get("type", "message") == "message":
            content = item.get("content")
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            if isinstance(content, str):
                content = [{"type": kind, "text": content}]
            listed.update(type="message", content=content)
        out.append(listed)
    return out
