"""Long-term memory through the real proxy: real Mem0 over Qdrant local mode; the fake upstream
serves the chat, Mem0's extraction call and the embeddings."""

from __future__ import annotations

import json

import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import stream_raw
from tests.support.longterm_support import (
    chat,
    forwarded_recall,
    memory_block,
    memory_fields,
    memory_texts,
    wait_for_memory,
    wait_until,
)
from tests.support.proxy import Proxy


def test_fact_from_one_session_is_recalled_in_another(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    client = proxy.client(token)
    client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "My favourite colour is teal"}],
        extra_headers={"X-Session-Id": "session-a"},
    )
    wait_for_memory(proxy, token_id, "My favourite colour is teal")

    reply = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "What is my favourite colour?"}],
        extra_headers={"X-Session-Id": "session-b"},
    )
    assert reply.choices[0].message.content == "Hello from upstream"
    forwarded = upstream.proxied_requests[-1].json["messages"]
    # Session b has no history: the fact can only have come from long-term memory.
    assert [m["role"] for m in forwarded] == ["user", "user"]
    assert "My favourite colour is teal" in memory_block(forwarded[0]["content"])
    assert forwarded[-1] == {"role": "user", "content": "What is my favourite colour?"}


def test_extraction_gets_user_text_and_final_answer_only(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(
        **memory_fields(proxy.upstream_url), memory_prompt="Only keep hobbies."
    )
    assert chat(proxy, token, "I collect vintage stamps").status_code == 200
    wait_for_memory(proxy, token_id, "I collect vintage stamps")

    upstream.enqueue(Scenario(content="Noted, stamps again.", reasoning="SECRET-REASONING"))
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "SYSTEM-PROMPT-TEXT"},
            {"role": "user", "content": "I also collect old coins"},
        ],
    }
    assert proxy.chat(token, {"X-Session-Id": "other"}, **body).status_code == 200
    wait_for_memory(proxy, token_id, "I also collect old coins")

    prompt = upstream.memory_requests[-1].json["messages"][-1]["content"]
    new = prompt.split("## New Messages\n", 1)[1].split("\n\n## ", 1)[0]
    assert new.splitlines() == ["user: I also collect old coins", "assistant: Noted, stamps again."]
    for never in ("SYSTEM-PROMPT-TEXT", "SECRET-REASONING", "Memories about this user"):
        assert never not in prompt
    assert "## Custom Instructions\nOnly keep hobbies." in prompt


def test_tool_payloads_never_reach_memory_and_query_is_latest_user_text(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    # A reply of tool calls only is not a finished turn: nothing to remember.
    upstream.enqueue(Scenario(tool_calls=[ToolCall("lookup", {"q": "TOOL-ARGS"})]))
    assert chat(proxy, token, "What is the weather in Oslo?").status_code == 200
    upstream.enqueue(Scenario(content="It is sunny in Oslo."))
    conversation = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "TOOL-ARGS"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "TOOL-RESULT sunny"},
    ]
    upstream.requests.clear()
    reply = proxy.chat(token, {"X-Session-Id": "s"}, model="m", messages=conversation)
    assert reply.status_code == 200
    # The search used the latest user text, not the tool result that ends the request.
    search_inputs = [r.json["input"] for r in upstream.embedding_requests]
    assert search_inputs[0] == ["What is the weather in Oslo?"]
    wait_for_memory(proxy, token_id, "What is the weather in Oslo?")
    assert len(upstream.memory_requests) == 1
    prompt = upstream.memory_requests[0].json["messages"][-1]["content"]
    assert "TOOL-RESULT" not in prompt and "TOOL-ARGS" not in prompt
    assert "assistant: It is sunny in Oslo." in prompt


def test_streamed_turn_is_remembered_too(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.enqueue(Scenario(content="A fine choice."))
    body = {"model": "m", "messages": [{"role": "user", "content": "I prefer window seats"}]}
    response, raw = stream_raw(proxy, token, body)
    assert response.status_code == 200 and raw.endswith(b"data: [DONE]\n\n")
    wait_for_memory(proxy, token_id, "I prefer window seats")


def test_layer_off_without_config_and_detail_says_so(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token()
    assert chat(proxy, token, "I like jazz").status_code == 200
    assert upstream.embedding_requests == [] and upstream.memory_requests == []
    layers = proxy.admin("GET", f"/tokens/{token_id}").json()["memory_layers"]
    assert layers["longterm"] == "off: no memory LLM/embedder configured"

    on_id, _ = proxy.create_token(**memory_fields(proxy.upstream_url, dims=24))
    layers = proxy.admin("GET", f"/tokens/{on_id}").json()["memory_layers"]
    assert layers["longterm"] == (
        "on (memory LLM openai fake-memory-llm; embedder openai bow-embed, 24 dims; limit 5)"
    )


def test_partial_memory_config_is_422_naming_the_missing_fields(proxy: Proxy) -> None:
    full = memory_fields(proxy.upstream_url)
    for missing in (["embed_dims"], ["embed_provider", "embed_dims"]):
        body = {k: v for k, v in full.items() if k not in missing}
        reply = proxy.admin(
            "POST", "/tokens", json={"name": "t", "llm_base_url": proxy.upstream_url, **body}
        )
        assert reply.status_code == 422, reply.text
        message = reply.json()["error"]["message"]
        assert message.startswith(missing[0] + ":")
        assert all(name in message for name in missing)
    assert proxy.admin("GET", "/tokens").json()["data"] == []

    token_id, _ = proxy.create_token(**full)
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"embed_dims": None})
    assert reply.status_code == 422 and "embed_dims" in reply.json()["error"]["message"]
    cleared = {name: None for name in full}
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json=cleared)
    assert reply.status_code == 200
    assert reply.json()["memory_layers"]["longterm"].startswith("off")


def test_end_user_memories_are_their_own(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    assert chat(proxy, token, "My dog is called Rex", user="Ann Lee").status_code == 200
    wait_for_memory(proxy, token_id, "My dog is called Rex", user="Ann Lee")
    assert memory_texts(proxy, token_id, user="") == set()

    # The end user from the X-User-Id header is the same namespace as the body's `user`.
    reply = proxy.chat(
        token,
        {"X-User-Id": "Ann Lee"},
        model="m",
        messages=[{"role": "user", "content": "What is my dog called?"}],
    )
    assert reply.status_code == 200
    assert "My dog is called Rex" in memory_block(forwarded_recall(upstream))
    assert chat(proxy, token, "What is my dog called?").status_code == 200
    assert memory_block(forwarded_recall(upstream)) == []
    listed = proxy.admin("GET", f"/tokens/{token_id}/memories").json()["data"]
    rex = [m["user"] for m in listed if m["memory"] == "My dog is called Rex"]
    assert rex == ["Ann Lee"]


def test_memory_limit_bounds_the_injected_memories(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url), memory_limit=2)
    facts = [f"My code word number {n} is {word}" for n, word in enumerate(["ant", "bee", "cat"])]
    for fact in facts:
        assert chat(proxy, token, fact).status_code == 200
    wait_until(lambda: memory_texts(proxy, token_id) == set(facts), what="three memories")
    # Asked in another session: in this one the facts are in the history the prompt carries,
    # and the Context Forge never injects what the prompt already has.
    assert chat(proxy, token, "What are my code words?", session="other").status_code == 200
    injected = memory_block(forwarded_recall(upstream))
    assert len(injected) == 2 and set(injected) <= set(facts)
    assert json.dumps(injected)  # plain strings


@pytest.fixture
def proxy(mem0_proxy: Proxy) -> Proxy:
    """These tests are about Mem0's facts: episodic recall is off (tested on its own)."""
    return mem0_proxy
