"""The fake upstream's Responses API, driven by the official openai SDK directly (no proxy in
between): what the proxy's tests rely on is what the SDK reads."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.responses_helpers import sse_events

MODEL = "gpt-4o-mini"


@pytest.fixture
def client(upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{upstream_server[1]}/v1", api_key="sk-test", max_retries=0)


def test_a_response_object_the_sdk_reads(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    call = ToolCall("f", {"x": 1}, id="call_f")
    upstream.enqueue(Scenario(content="Hi", reasoning="think", tool_calls=[call], id="resp_x"))
    response = client.responses.create(model=MODEL, input="hello", instructions="I")
    assert (response.id, response.status, response.output_text) == ("resp_x", "completed", "Hi")
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    assert response.instructions == "I" and response.usage is not None
    [recorded] = upstream.responses_requests
    assert recorded.json == {"model": MODEL, "input": "hello", "instructions": "I"}


def test_a_stream_the_sdk_reads(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.enqueue(Scenario(content="one two", tool_calls=[ToolCall("f", "{}", id="c")]))
    with client.responses.stream(model=MODEL, input="hello") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert final.output_text == "one two"
    assert [i.type for i in final.output] == ["message", "function_call"]
    # Every event names its type twice: the `event:` line and the data's `type`.
    assert all(name == data["type"] for name, data in sse_events(upstream.sent_bytes[-1]))


def test_failed_incomplete_and_bare_endings(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.enqueue(Scenario(content="partial", response_status="failed"))
    events = list(client.responses.create(model=MODEL, input="x", stream=True))
    assert events[-1].type == "response.failed"
    assert any(e.type == "response.output_text.delta" for e in events)
    upstream.enqueue(Scenario(content="cut", response_status="incomplete"))
    response = client.responses.create(model=MODEL, input="x")
    assert response.status == "incomplete" and response.incomplete_details is not None
    upstream.enqueue(Scenario(content="bare", bare_completed=True))
    events = list(client.responses.create(model=MODEL, input="x", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output == []


def test_stored_responses_answer_the_paths_below(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.enqueue(Scenario(content="kept", id="resp_k"))
    client.responses.create(model=MODEL, input=[{"role": "user", "content": "q"}])
    assert client.responses.retrieve("resp_k").output_text == "kept"
    [item] = client.responses.input_items.list("resp_k").data
    assert item.type == "message" and item.content[0].type == "input_text"
    assert item.content[0].text == "q"
    assert client.responses.cancel("resp_k").status == "cancelled"
    client.responses.delete("resp_k")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_k")
    upstream.enqueue(Scenario(status=503))
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model=MODEL, input="x")
