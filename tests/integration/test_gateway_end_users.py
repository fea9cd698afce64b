"""End users are a boundary in the Memory Gateway layer too, through the real proxy and a
stateful fake Gateway that answers searches from what was added: two end users of one token,
with and without session ids, never share a Gateway conversation and never see each other's
words; a request with no end user keeps the design's exact payload; `all_user_memory` is
refused for a token that does not serve a single end user."""

from __future__ import annotations

import json

from tests.fakes.gateway import ADD, FLUSH, SEARCH, FakeGateway
from tests.fakes.upstream import FakeUpstream
from tests.support.hybrid_memory_support import (
    MODEL,
    Served,
    gateway_memory,
    wait_until,
)
from tests.support.proxy import Proxy

ALICE_PIN = "PIN 4417-ALICE-QUARTZ"
BOB_PIN = "PIN 9902-BOB-MARBLE"


def _say(proxy: Proxy, token: str, text: str, user: str | None, session: str | None) -> None:
    headers = {"X-Session-Id": session} if session is not None else {}
    extra = {"user": user} if user is not None else {}
    proxy.client(token).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        extra_headers=headers,
        **extra,
    )


def _flushed(gateway: FakeGateway, count: int) -> None:
    wait_until(lambda: len(gateway.payloads(FLUSH)) >= count, f"{count} gateway flushes")


def _last_forwarded(upstream: FakeUpstream) -> str:
    return json.dumps(upstream.chat_requests[-1].json, ensure_ascii=False)


def test_two_end_users_never_meet_in_the_gateway(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    gateway.remember_adds()
    proxy = served.proxy
    _, token = proxy.create_token(memory=gateway_memory(gw_url))
    flushes = 0
    for session in (None, "shared-session"):
        _say(proxy, token, f"Remember my {ALICE_PIN}", "alice", session)
        _say(proxy, token, f"Remember my {BOB_PIN}", "bob", session)
        flushes += 2
        _flushed(gateway, flushes)
        _say(proxy, token, "What is my PIN?", "bob", session)
        seen_by_bob = _last_forwarded(upstream)
        _say(proxy, token, "What is my PIN?", "alice", session)
        seen_by_alice = _last_forwarded(upstream)
        # Each gets their own back from the Gateway (the fake recalls), never the other's.
        assert BOB_PIN in seen_by_bob and ALICE_PIN not in seen_by_bob
        assert ALICE_PIN in seen_by_alice and BOB_PIN not in seen_by_alice
        flushes += 2
        _flushed(gateway, flushes)

    searched = {p["conversation_id"] for p in gateway.payloads(SEARCH)}
    assert searched == {
        "mb-user:alice:default",
        "mb-user:bob:default",
        "mb-user:alice:shared-session",
        "mb-user:bob:shared-session",
    }
    added = {p["session_id"] for p in gateway.payloads(ADD)}
    assert added == {f"chat:{c}" for c in searched}
    assert gateway.violations == []


def test_a_request_without_an_end_user_keeps_the_exact_payload(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    gateway.remember_adds()
    proxy = served.proxy
    _, token = proxy.create_token(memory=gateway_memory(gw_url))
    _say(proxy, token, f"Remember my {ALICE_PIN}", None, None)
    _say(proxy, token, f"Remember my {BOB_PIN}", None, "s-7")
    _flushed(gateway, 2)
    assert [p["conversation_id"] for p in gateway.payloads(SEARCH)] == ["default", "s-7"]
    assert [p["session_id"] for p in gateway.payloads(ADD)] == ["chat:default", "chat:s-7"]
    assert [p["session_id"] for p in gateway.payloads(FLUSH)] == ["chat:default", "chat:s-7"]
    # A session with no end user that would pass for an end user's conversation gets no
    # Gateway layer at all (neither recall nor add), and the request is served as usual.
    _say(proxy, token, "What is my PIN?", "alice", None)
    _flushed(gateway, 3)
    before = len(gateway.calls)
    _say(proxy, token, "What is my PIN?", None, "mb-user:alice:default")
    assert ALICE_PIN not in _last_forwarded(upstream)
    served.drain()
    assert len(gateway.calls) == before
    assert gateway.violations == []


def test_all_user_memory_needs_a_single_end_user_token(served: Served, gw_url: str) -> None:
    proxy = served.proxy
    base = {"name": "t", "llm_base_url": proxy.upstream_url, "llm_api_key": "sk-upstream-0123"}
    wide = gateway_memory(gw_url, scope=["current_chat", "all_user_memory"])
    refused = proxy.admin("POST", "/tokens", json={**base, "memory": wide})
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert "memory.gateway.scope" in message and "singleEndUser" in message
    token_id, _ = proxy.create_token()
    patched = proxy.admin("PATCH", f"/tokens/{token_id}", json={"memory": wide})
    assert patched.status_code == 422, patched.text
    single = gateway_memory(gw_url, scope=["all_user_memory"], singleEndUser=True)
    made = proxy.admin("POST", "/tokens", json={**base, "memory": single})
    assert made.status_code == 201, made.text
