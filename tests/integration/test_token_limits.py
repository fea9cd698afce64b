"""Per-token limits (`limits` in a token's config): validated when saved, enforced before any
memory work with a 429 in the OpenAI shape carrying `Retry-After`, counted in `/metrics`, and
one token's limit never touches another token."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.jobs_support import poll
from tests.support.proxy import Proxy

HELD = 5.0  # seconds the fake upstream holds a "hold" turn: the third comes meanwhile


def _held(request: Any) -> Scenario | None:
    text = str(request["messages"][-1]["content"])
    return Scenario(delay=HELD) if text.startswith("hold") else None


def test_a_third_concurrent_request_is_refused_and_another_token_is_not(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    limited_id, limited = proxy.create_token(limits={"max_concurrent": 2})
    _, other = proxy.create_token()
    upstream.responder = _held
    held: list[httpx.Response] = []

    def hold(n: int) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": f"hold {n}"}]}
        held.append(proxy.chat(limited, **body))

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    try:
        poll(lambda: len(upstream.proxied_requests) >= 2, "both held turns at the upstream")
        with pytest.raises(openai.RateLimitError) as refused:
            proxy.client(limited).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "third"}]
            )
        other_reply = proxy.client(other).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "unaffected"}]
        )
    finally:
        for thread in threads:
            thread.join(60)
    reply = refused.value.response
    assert reply.status_code == 429
    assert int(reply.headers["retry-after"]) >= 1
    error = reply.json()["error"]
    assert error["type"] == "rate_limit_exceeded" and "2 concurrent" in error["message"]
    assert other_reply.choices[0].message.content
    assert [r.status_code for r in held] == [200, 200]
    # Refused before anything was done for it: it never reached the upstream.
    texts = [str(r.json["messages"][-1]["content"]) for r in upstream.proxied_requests]
    assert "third" not in texts
    # Its slots are back once the held turns are over.
    again = proxy.client(limited).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "later"}]
    )
    assert again.choices[0].message.content
    metrics = httpx.get(f"{proxy.url}/metrics", headers=proxy.admin_headers, timeout=30)
    assert metrics.status_code == 200
    name = f'memorybridge_token_limited_total{{limit="max_concurrent",token_id="{limited_id}"}}'
    counted = [line for line in metrics.text.splitlines() if line.startswith(name + " ")]
    # The registry is the test process's: earlier tests' proxies may have counted too.
    assert counted and float(counted[0].split()[-1]) >= 1, counted
    assert limited not in metrics.text


def test_requests_per_minute_answers_with_when_to_come_back(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token(limits={"requests_per_minute": 2})
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    replies = [proxy.chat(token, **body) for _ in range(3)]
    assert [r.status_code for r in replies] == [200, 200, 429]
    assert 1 <= int(replies[2].headers["retry-after"]) <= 60


def test_tokens_per_minute_counts_the_input(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token(limits={"tokens_per_minute": 1000})
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 3000}]}  # ~760 tokens
    assert proxy.chat(token, **big).status_code == 200
    refused = proxy.chat(token, **big)
    assert refused.status_code == 429
    assert "tokens per minute" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"max_concurrent": 0}, "limits.max_concurrent"),
        ({"requests_per_minute": 10_000_000}, "limits.requests_per_minute"),
        ({"tokens_per_minute": "many"}, "limits.tokens_per_minute"),
        ({"max_parallel": 2}, "limits.max_parallel"),
        ([2], "limits"),
    ],
)
def test_limits_are_validated_when_saved(proxy: Proxy, limits: Any, field: str) -> None:
    body = {"name": "t", "llm_base_url": proxy.upstream_url, "limits": limits}
    reply = proxy.admin("POST", "/tokens", json=body)
    assert reply.status_code == 422, reply.text
    assert field in reply.json()["error"]["message"]
    token_id, _ = proxy.create_token()
    patched = proxy.admin("PATCH", f"/tokens/{token_id}", json={"limits": limits})
    assert patched.status_code == 422 and field in patched.json()["error"]["message"]
