"""One session, two wire formats: chat completions and Responses calls share one history, and a
client that resends the whole conversation gets nothing injected twice and stores nothing twice."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import assistant, last_messages, stored_rows, user
from tests.support.proxy import Proxy
from tests.support.responses_helpers import MODEL, forwarded, msg, post

HEADERS = {"X-Session-Id": "mixed", "X-User-Id": "ann"}


def test_chat_completions_and_responses_share_one_history(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token, default_headers=HEADERS)

    upstream.enqueue(Scenario(tool_calls=[ToolCall("lookup", {"q": "tea"}, id="call_t")]))
    client.chat.completions.create(model=MODEL, messages=[user("What tea do I like?")])
    upstream.enqueue(Scenario(content="Green tea."))
    client.chat.completions.create(
        model=MODEL,
        messages=[
            user("What tea do I like?"),
            assistant(
                None,
                tool_calls=[
                    {
                        "id": "call_t",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q":"tea"}'},
                    }
                ],
            ),
            {"role": "tool", "tool_call_id": "call_t", "content": "green"},
        ],
    )

    # A Responses call sees the chat turns as items: messages, a call and its output.
    upstream.enqueue(Scenario(content="In Lyon."))
    client.responses.create(model=MODEL, input="Where do I live?")
    assert forwarded(upstream)["input"] == [
        msg("user", "What tea do I like?"),
        {
            "type": "function_call",
            "call_id": "call_t",
            "name": "lookup",
            "arguments": '{"q":"tea"}',
        },
        {"type": "function_call_output", "call_id": "call_t", "output": "green"},
        msg("assistant", "Green tea."),
        msg("user", "Where do I live?"),
    ]

    # ... and a chat call sees the Responses turn as messages.
    upstream.enqueue(Scenario(content="Noted."))
    client.chat.completions.create(model=MODEL, messages=[user("Thanks")])
    assert last_messages(upstream)[-4:] == [
        assistant("Green tea."),
        user("Where do I live?"),
        assistant("In Lyon."),
        user("Thanks"),
    ]
    rows = stored_rows(proxy)
    assert {(u, s) for _, u, s, _, _ in rows} == {("ann", "mixed")}
    assert [role for *_, role, _ in rows] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_a_stateless_client_resending_everything_is_injected_and_stored_once(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    """`store: false` and no previous id: the client resends the conversation, output items
    included; what it carries is recognised, so nothing is doubled — but a repeated short
    message is a new message."""
    _, token = proxy.create_token()
    conversation: list[dict[str, object]] = []
    for n, text in enumerate(["ok", "continue", "ok"]):
        conversation.append({"role": "user", "content": text})
        upstream.enqueue(Scenario(content=f"answer {n}"))
        reply = post(proxy, token, {"model": MODEL, "input": conversation, "store": False})
        assert reply.status_code == 200
        # Only what the client sent: the stored turns it carries are not injected again.
        assert forwarded(upstream)["input"] == conversation
        conversation.extend(reply.json()["output"])  # output items resent as they came
    contents = [body["content"] for *_, body in stored_rows(proxy)]
    assert contents == ["ok", "answer 0", "continue", "answer 1", "ok", "answer 2"]

    # The same session from a client that sends only the newest item gets the history.
    upstream.enqueue(Scenario(content="answer 3"))
    assert post(proxy, token, {"model": MODEL, "input": "and?"}).status_code == 200
    assert [item["content"] for item in forwarded(upstream)["input"]] == [*contents, "and?"]


def test_the_end_user_comes_from_the_body_or_the_header(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    client.responses.create(model=MODEL, input="from the body", user="bob")
    client.responses.create(
        model=MODEL, input="from the header", extra_headers={"X-User-Id": "carol"}
    )
    assert [(u, s, b["content"]) for _, u, s, role, b in stored_rows(proxy) if role == "user"] == [
        ("bob", "default", "from the body"),
        ("carol", "default", "from the header"),
    ]
    with pytest.raises(openai.UnprocessableEntityError, match="user must be at most"):
        client.responses.create(model=MODEL, input="hi", user="x" * 201)
