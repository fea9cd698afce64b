"""`POST /v1/responses` through the real proxy with the official `openai` SDK: what is forwarded
untouched, where memory goes, `previous_response_id`, a function-call round trip, the 422s,
and the paths below `/v1/responses/` passed through."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from memory_bridge.sources.gateway_client import GATEWAY_RULE
from tests.fakes.gateway import FakeGateway
from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import auth, injected_counts, stored_rows
from tests.support.hybrid_memory_support import CURATED_HEADER, RECALL_LABEL, gateway_memory
from tests.support.proxy import UPSTREAM_KEY, Proxy
from tests.support.responses_helpers import MODEL, forwarded, msg, post

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


SESSION: dict[str, Any] = {"extra_headers": {"X-Session-Id": "s"}}


def test_every_field_reaches_the_upstream_and_the_answer_comes_back_unchanged(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    body = {
        "model": MODEL,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi ✓"}]}],
        "tools": TOOLS,
        "tool_choice": "auto",
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "store": False,
        "metadata": {"k": "v"},
        "include": ["reasoning.encrypted_content"],
        "truncation": "auto",
        "parallel_tool_calls": False,
        "max_output_tokens": 50,
        "x_vendor_extension": {"nested": [1, 2.5, None]},
    }
    raw = json.dumps(body, ensure_ascii=False).encode()
    upstream.enqueue(Scenario(content="Bonjour", id="resp_abc", headers={"x-custom": "1"}))
    reply = post(proxy, token, raw)
    assert reply.status_code == 200
    # A first turn has nothing to inject: the client's very bytes go upstream.
    [sent] = upstream.responses_requests
    assert sent.body == raw
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert reply.json() == upstream.stored_responses["resp_abc"][0]
    assert reply.headers["x-custom"] == "1"
    assert reply.headers["x-upstream-request-id"].startswith("req_fake_")
    assert reply.headers["x-request-id"] != reply.headers["x-upstream-request-id"]


def test_the_sdk_gets_its_response_object(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="Grüezi ✓", reasoning="SECRET-REASONING", id="resp_1"))
    response = proxy.client(token).responses.create(
        model=MODEL, input="Hello", instructions="Be kind.", **SESSION
    )
    assert (response.id, response.status, response.output_text) == (
        "resp_1",
        "completed",
        "Grüezi ✓",
    )
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.usage is not None and response.usage.output_tokens > 0
    assert forwarded(upstream)["instructions"] == "Be kind."
    # The turn is stored as chat messages: the user text and the answer, no reasoning.
    rows = [(role, body) for _, _, _, role, body in stored_rows(proxy)]
    assert rows == [
        ("user", {"role": "user", "content": "Hello"}),
        ("assistant", {"role": "assistant", "content": "Grüezi ✓"}),
    ]


def test_memory_goes_where_it_goes_for_chat_and_instructions_stay_byte_stable(
    proxy: Proxy, upstream: FakeUpstream, gateway: FakeGateway, gw_url: str
) -> None:
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    put = proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content="Codename BLUEBIRD.")
    assert put.status_code == 204
    client = proxy.client(token)

    upstream.enqueue(Scenario(content="first answer"))
    client.responses.create(model=MODEL, input="first question", **SESSION)
    first = forwarded(upstream)
    assert first["input"] == "first question"  # nothing to place before it yet
    assert CURATED_HEADER in first["instructions"] and GATEWAY_RULE in first["instructions"]

    instructions = []
    for n, fact in enumerate(["User likes green tea", "User lives in Lyon"]):
        gateway.set_results([{"text": fact}])
        upstream.enqueue(Scenario(content=f"answer {n}"))
        question = {"role": "user", "content": f"question {n}"}
        client.responses.create(model=MODEL, instructions="Be terse.", input=[question], **SESSION)
        sent = forwarded(upstream)
        instructions.append(sent["instructions"])
        *history, block, own = sent["input"]
        assert own == question  # the request's own item, as sent
        assert block["role"] == "user" and block["content"].startswith(RECALL_LABEL)
        assert fact in block["content"] and fact not in sent["instructions"]
        assert history[:2] == [msg("user", "first question"), msg("assistant", "first answer")]
        assert len(history) == 2 + 2 * n
        assert json.dumps(sent).count(RECALL_LABEL) == 1
    # Curated snapshot and fixed rules only: the same bytes every turn.
    assert instructions[0] == instructions[1]
    assert instructions[0].startswith("Be terse.\n\n") and "Codename BLUEBIRD." in instructions[0]
    # Injected memory is never stored.
    assert RECALL_LABEL not in json.dumps(stored_rows(proxy))


def test_previous_response_id_gets_memory_but_no_history_and_is_still_stored(
    proxy: Proxy, upstream: FakeUpstream, gateway: FakeGateway, gw_url: str
) -> None:
    _, token = proxy.create_token(memory=gateway_memory(gw_url))
    client = proxy.client(token)
    upstream.enqueue(Scenario(content="first answer", id="resp_first"))
    client.responses.create(model=MODEL, input="first question", **SESSION)

    gateway.set_results([{"text": "User likes green tea"}])
    upstream.enqueue(Scenario(content="second answer"))
    reply = post(
        proxy, token, {"model": MODEL, "previous_response_id": "resp_first", "input": "again?"}
    )
    sent = forwarded(upstream)
    assert sent["previous_response_id"] == "resp_first"
    # The upstream holds the conversation: only the recall block joins the request's item.
    [block, own] = sent["input"]
    assert block["content"].startswith(RECALL_LABEL) and own == msg("user", "again?")
    assert injected_counts(reply)["history"] == 0
    stored = [body["content"] for *_, body in stored_rows(proxy)]
    assert stored == ["first question", "first answer", "again?", "second answer"]


def test_a_function_call_round_trip(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    call = ToolCall("get_weather", {"city": "Oslo"}, id="call_1")
    upstream.enqueue(Scenario(tool_calls=[call], id="resp_call"))
    first = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=TOOLS, **SESSION)
    [fc] = [item for item in first.output if item.type == "function_call"]
    assert (fc.call_id, fc.name, json.loads(fc.arguments)) == (
        "call_1",
        "get_weather",
        {"city": "Oslo"},
    )

    upstream.enqueue(Scenario(content="Sunny in Oslo."))
    output = {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[output], tools=TOOLS, **SESSION
    )
    assert second.output_text == "Sunny in Oslo."
    assert forwarded(upstream)["input"] == [output]
    arguments = json.dumps({"city": "Oslo"}, separators=(",", ":"))
    assert [body for *_, body in stored_rows(proxy)] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "Sunny in Oslo."},
    ]


BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    ("input-number", b'{"model": "m", "input": 42}', 422, "'input' must be a string or an array"),
    ("item-list", b'{"model": "m", "input": [["user", "x"]]}', 422, "input[0] must be an object"),
    ("bad-role", b'{"model": "m", "input": [{"role": "robot", "content": "x"}]}', 422, "role"),
    (
        "bad-part",
        b'{"model": "m", "input": [{"role": "user", "content": [{}]}]}',
        422,
        "content[0]",
    ),
    ("call-no-id", b'{"input": [{"type": "function_call", "name": "f"}]}', 422, "].call_id"),
    ("instructions", b'{"model": "m", "input": "x", "instructions": 5}', 422, "'instructions'"),
    ("previous", b'{"model": "m", "input": "x", "previous_response_id": []}', 422, "previous"),
    ("input-twice", b'{"model": "m", "input": "a", "input": "b"}', 422, "'input' more than once"),
    ("not-json", b'{"model": "m", "input": ', 400, "not valid JSON"),
    ("not-object", b'["input"]', 400, "must be a JSON object"),
    ("lone-surrogate", b'{"input": "\\udc80"}', 422, "not valid Unicode"),
]


@pytest.mark.parametrize(
    ("body", "status", "text"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES]
)
def test_what_the_proxy_cannot_read_is_refused_before_the_upstream(
    proxy: Proxy, upstream: FakeUpstream, body: bytes, status: int, text: str
) -> None:
    _, token = proxy.create_token()
    reply = post(proxy, token, body)
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and text in error["message"]
    assert error["request_id"] == reply.headers["x-request-id"]
    assert upstream.responses_requests == []


def test_the_sdk_raises_its_own_error_types(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    with pytest.raises(openai.UnprocessableEntityError):
        client.responses.create(model=MODEL, input=[{"role": "robot", "content": "x"}])  # type: ignore[list-item]
    upstream.enqueue(Scenario(status=429))
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model=MODEL, input="x")
    with pytest.raises(openai.AuthenticationError):
        proxy.client("mb-not-a-token").responses.create(model=MODEL, input="x")
    with pytest.raises(openai.PermissionDeniedError):
        proxy.client(proxy.admin_token).responses.create(model=MODEL, input="x")
    assert stored_rows(proxy) == []  # an error is not a turn


def test_the_paths_below_responses_are_passed_through(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    upstream.enqueue(Scenario(content="kept upstream", id="resp_kept"))
    list(client.responses.create(model=MODEL, input="remember this", stream=True))
    upstream.enqueue(Scenario(content="plain", id="resp_plain"))
    client.responses.create(model=MODEL, input="plain one", **SESSION)  # another session

    assert client.responses.retrieve("resp_plain").output_text == "plain"
    items = client.responses.input_items.list("resp_plain", limit=5, order="asc")
    assert [item.type for item in items.data] == ["message"]
    assert client.responses.cancel("resp_plain").status == "cancelled"
    replayed = list(client.responses.retrieve("resp_kept", stream=True))
    assert replayed[-1].type == "response.completed"
    client.responses.delete("resp_plain")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_plain")

    below = [r for r in upstream.requests if r.path.startswith("/v1/responses/")]
    assert [(r.method, r.path, r.query) for r in below] == [
        ("GET", "/v1/responses/resp_plain", ""),
        ("GET", "/v1/responses/resp_plain/input_items", "limit=5&order=asc"),
        ("POST", "/v1/responses/resp_plain/cancel", ""),
        ("GET", "/v1/responses/resp_kept", "stream=true"),
        ("DELETE", "/v1/responses/resp_plain", ""),
        # Deleted: no longer the token's, answered without the upstream (test_responses_owners).
    ]
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in below)


def test_a_path_that_escapes_the_prefix_is_not_forwarded(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    url = f"{proxy.url}/v1/responses/%2e%2e/chat/completions"
    reply = httpx.post(url, json={"model": MODEL, "messages": []}, headers=auth(token))
    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_a_passthrough_token_forwards_everything_untouched(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token(memory={"mode": "off"})
    raw = b'{"model": "m", "input": [{"role": "robot", "content": 1}], "instructions": 5}'
    assert post(proxy, token, raw).status_code == 200  # the upstream judges, not us
    assert upstream.responses_requests[-1].body == raw
    client = proxy.client(token)
    client.responses.create(model=MODEL, input="one", **SESSION)
    upstream.enqueue(Scenario(content="streamed"))
    with client.responses.stream(model=MODEL, input="two", **SESSION) as stream:
        assert stream.get_final_response().output_text == "streamed"
    assert forwarded(upstream)["input"] == "two"  # no history
    assert stored_rows(proxy) == []


def test_only_post_creates_a_response(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    reply = httpx.get(f"{proxy.url}/v1/responses", headers=auth(token))
    assert reply.status_code == 405 and reply.headers["allow"] == "POST"
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert httpx.post(f"{proxy.url}/v1/responses", json={"input": "x"}).status_code == 401
    assert upstream.requests == []
