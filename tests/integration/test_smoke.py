from __future__ import annotations

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.proxy import UPSTREAM_KEY, Proxy


def test_openai_sdk_round_trip_remembers_the_session(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    upstream.enqueue(Scenario(content="Nice to meet you, Ada."))
    first = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "My name is Ada."}]
    )
    assert first.choices[0].message.content == "Nice to meet you, Ada."
    sent = upstream.chat_requests[-1]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent.json["messages"] == [{"role": "user", "content": "My name is Ada."}]

    client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "What is my name?"}]
    )
    assert upstream.chat_requests[-1].json["messages"] == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
