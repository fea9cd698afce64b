"""Session history as clients experience it: scope, window, placement, no duplicates with
clients that resend the conversation, and read-your-writes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import (
    Msg,
    assistant,
    auth,
    injected,
    injected_counts,
    last_messages,
    stored_rows,
    system,
    user,
)
from tests.support.proxy import Proxy

MODEL = "gpt-4o-mini"


def _turn(
    proxy: Proxy,
    upstream: FakeUpstream,
    token: str,
    messages: list[Msg],
    reply: str,
    headers: dict[str, str] | None = None,
    **body: Any,
) -> httpx.Response:
    upstream.enqueue(Scenario(content=reply))
    response = proxy.chat(token, headers, model=MODEL, messages=messages, **body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == reply
    return response


def test_session_id_separates_histories(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    _turn(proxy, upstream, token, [user("in A")], "reply A", {"X-Session-Id": "A"})
    _turn(proxy, upstream, token, [user("in B")], "reply B", {"X-Session-Id": "B"})
    _turn(proxy, upstream, token, [user("default")], "reply D")

    _turn(proxy, upstream, token, [user("A again")], "ok", {"X-Session-Id": "A"})
    assert injected(upstream, [user("A again")]) == [user("in A"), assistant("reply A")]
    _turn(proxy, upstream, token, [user("B again")], "ok", {"X-Session-Id": "B"})
    assert injected(upstream, [user("B again")]) == [user("in B"), assistant("reply B")]
    _turn(proxy, upstream, token, [user("D again")], "ok")
    assert injected(upstream, [user("D again")]) == [user("default"), assistant("reply D")]


def test_end_user_separates_histories(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    _turn(proxy, upstream, token, [user("alice here")], "hi alice", user="alice")
    _turn(proxy, upstream, token, [user("bob here")], "hi bob", {"X-User-Id": "bob"})
    _turn(proxy, upstream, token, [user("nobody")], "hi all")

    # the body field and the header name the same end user
    _turn(proxy, upstream, token, [user("me?")], "alice", {"X-User-Id": "alice"})
    assert injected(upstream, [user("me?")]) == [user("alice here"), assistant("hi alice")]
    _turn(proxy, upstream, token, [user("me?")], "bob", user="bob")
    assert injected(upstream, [user("me?")]) == [user("bob here"), assistant("hi bob")]
    _turn(proxy, upstream, token, [user("me?")], "all")
    assert injected(upstream, [user("me?")]) == [user("nobody"), assistant("hi all")]

    rows = stored_rows(proxy)
    assert {(u, s) for _, u, s, _, _ in rows} == {
        ("alice", "default"),
        ("bob", "default"),
        ("", "default"),
    }
    # and the forwarded body keeps `user` as the client sent it
    assert upstream.chat_requests[-2].json["user"] == "bob"


def test_tokens_never_share_history(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, first = proxy.create_token()
    _, second = proxy.create_token()
    _turn(proxy, upstream, first, [user("secret of token one")], "noted")
    _turn(proxy, upstream, second, [user("hello")], "hi")
    assert last_messages(upstream) == [user("hello")]


def test_only_the_latest_window_is_injected(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token(session_window_size=4)
    for i in range(1, 4):
        _turn(proxy, upstream, token, [user(f"u{i}")], f"a{i}")
    # Three turns stored (6 messages) > 4: the window steps on by half, keeping the newest 2,
    # and then grows again from there (same start: a cacheable prefix) until it is full.
    _turn(proxy, upstream, token, [user("u4")], "a4")
    assert injected(upstream, [user("u4")]) == [user("u3"), assistant("a3")]
    _turn(proxy, upstream, token, [user("u5")], "a5")
    assert injected(upstream, [user("u5")]) == [
        user("u3"),
        assistant("a3"),
        user("u4"),
        assistant("a4"),
    ]
    assert len(stored_rows(proxy)) == 10  # the window limits injection, not storage


def test_history_goes_after_the_system_message_which_is_never_stored(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    _turn(proxy, upstream, token, [system("You are terse."), user("hi")], "hello")
    assert last_messages(upstream) == [system("You are terse."), user("hi")]

    messages = [system("You are verbose."), {"role": "developer", "content": "Dev."}, user("q")]
    _turn(proxy, upstream, token, messages, "answer")
    assert last_messages(upstream) == [
        system("You are verbose."),
        {"role": "developer", "content": "Dev."},
        user("hi"),
        assistant("hello"),
        user("q"),
    ]
    roles = [r for _, _, _, r, _ in stored_rows(proxy)]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert "terse" not in str(stored_rows(proxy))


def test_a_client_resending_the_whole_conversation_sees_no_duplicates(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    conversation: list[Msg] = [system("sys")]
    for i in range(1, 5):
        conversation.append(user(f"question {i}"))
        response = _turn(proxy, upstream, token, conversation, f"answer {i}")
        # the upstream sees exactly the client's conversation: nothing injected twice
        assert last_messages(upstream) == conversation
        assert injected_counts(response)["history"] == 0
        conversation.append(response.json()["choices"][0]["message"])

    bodies = [b for _, _, _, _, b in stored_rows(proxy)]
    expected = [m for m in conversation if m["role"] != "system"]
    assert [(b["role"], b["content"]) for b in bodies] == [
        (m["role"], m["content"]) for m in expected
    ]

    # a fresh, stateless request sees each stored message exactly once
    _turn(proxy, upstream, token, [user("summary?")], "done")
    assert injected(upstream, [user("summary?")]) == [
        {"role": m["role"], "content": m["content"]} for m in expected[-8:]
    ]


def test_resending_client_that_trimmed_its_context(proxy: Proxy, upstream: FakeUpstream) -> None:
    """A client that keeps only its last exchange gets the older part back from history."""
    _, token = proxy.create_token()
    _turn(proxy, upstream, token, [user("u1")], "a1")
    _turn(proxy, upstream, token, [user("u1"), assistant("a1"), user("u2")], "a2")
    trimmed = [user("u2"), assistant("a2"), user("u3")]
    _turn(proxy, upstream, token, trimmed, "a3")
    assert last_messages(upstream) == [user("u1"), assistant("a1"), *trimmed]
    contents = [b["content"] for *_, b in stored_rows(proxy)]
    assert contents == ["u1", "a1", "u2", "a2", "u3", "a3"]


def test_a_repeated_short_message_in_a_new_turn_is_stored_again(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    _turn(proxy, upstream, token, [user("ok")], "first")
    _turn(proxy, upstream, token, [user("ok")], "second")
    assert last_messages(upstream) == [user("ok"), assistant("first"), user("ok")]
    _turn(proxy, upstream, token, [user("ok")], "third")
    assert last_messages(upstream) == [
        user("ok"),
        assistant("first"),
        user("ok"),
        assistant("second"),
        user("ok"),
    ]
    contents = [b["content"] for *_, b in stored_rows(proxy)]
    assert contents == ["ok", "first", "ok", "second", "ok", "third"]


def test_a_resending_client_repeating_ok_keeps_both(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    _turn(proxy, upstream, token, [user("ok")], "sure")
    _turn(proxy, upstream, token, [user("ok"), assistant("sure"), user("ok")], "again")
    assert last_messages(upstream) == [user("ok"), assistant("sure"), user("ok")]
    contents = [b["content"] for *_, b in stored_rows(proxy)]
    assert contents == ["ok", "sure", "ok", "again"]


@pytest.mark.parametrize("rounds", [6])
def test_read_your_writes(proxy: Proxy, upstream: FakeUpstream, rounds: int) -> None:
    """The next request, sent the moment the previous response ends, sees that turn."""
    _, token = proxy.create_token()
    client = proxy.client(token)
    for i in range(rounds):
        question, answer = f"q{i}", f"reply number {i}"
        upstream.enqueue(Scenario(content=answer))
        if i % 3 == 0:
            client.chat.completions.create(model=MODEL, messages=[user(question)])
        elif i % 3 == 1:
            stream = client.chat.completions.create(
                model=MODEL, messages=[user(question)], stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream) == answer
        else:
            # hang up as soon as [DONE] has arrived, without reading the end of the body
            with httpx.stream(
                "POST",
                f"{proxy.url}/v1/chat/completions",
                json={"model": MODEL, "messages": [user(question)], "stream": True},
                headers=auth(token),
                timeout=30,
            ) as response:
                seen = b""
                for chunk in response.iter_raw():
                    seen += chunk
                    if b"[DONE]" in seen:
                        break
        upstream.enqueue(Scenario(content="ack"))
        client.chat.completions.create(model=MODEL, messages=[user("next")])
        history = injected(upstream, [user("next")])
        assert history[-2:] == [user(question), assistant(answer)], i
