"""A token with `memory.mode: "off"`: the proxy authenticates, forwards and relays, and
neither injects nor stores anything."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import (
    assistant,
    auth,
    injected_counts,
    sse_data,
    stored_rows,
    stream_raw,
    user,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy

MODEL = "gpt-4o-mini"
OFF = {"memory": {"mode": "off"}}


def _post_raw(proxy: Proxy, token: str, raw: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers=auth(token, **{"content-type": "application/json", **headers}),
        timeout=30,
    )


def test_admin_details_show_every_layer_off(proxy: Proxy) -> None:
    token_id, _ = proxy.create_token(**OFF)
    layers = proxy.admin("GET", f"/tokens/{token_id}").json()["memory_layers"]
    assert layers
    assert all(state.startswith("off") for state in layers.values()), layers


@pytest.mark.parametrize("stream", [False, True])
def test_nothing_is_injected_or_stored_and_the_bytes_go_upstream_unchanged(
    proxy: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    token_id, token = proxy.create_token(**OFF)
    put = proxy.admin(
        "PUT", f"/tokens/{token_id}/curated/memory", content="# Facts\n- the sky is green\n"
    )
    assert put.status_code == 204
    session = {"X-Session-Id": "s1"}
    first = json.dumps(
        {"model": MODEL, "messages": [user("first")], "stream": stream, "temperature": 0.1}
    ).encode()
    reply = _post_raw(proxy, token, first, **session)
    assert reply.status_code == 200
    assert upstream.chat_requests[-1].body == first
    assert injected_counts(reply) == {}

    # A second turn of the same session: a memory-on token would inject the first turn here.
    second = json.dumps(
        {"model": MODEL, "messages": [user("second")], "stream": stream}, separators=(",", ":")
    ).encode()
    reply = _post_raw(proxy, token, second, **session)
    assert reply.status_code == 200
    assert upstream.chat_requests[-1].body == second
    assert stored_rows(proxy) == []
    assert upstream.memory_requests == []


def test_the_upstream_key_replaces_the_service_token(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token(**OFF)
    assert proxy.chat(token, model=MODEL, messages=[user("hi")]).status_code == 200
    headers = upstream.chat_requests[-1].headers
    assert headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert token not in json.dumps(dict(headers))


def test_sse_bytes_reach_the_client_exactly(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token(**OFF)
    upstream.enqueue(Scenario(content="naïve café, split anywhere", chunk_size=7))
    response, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("go")]})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert raw == upstream.sent_bytes[-1]


def test_the_sdk_sees_a_normal_completion_and_stream(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token(**OFF)
    client = proxy.client(token)
    upstream.enqueue(Scenario(content="plain answer"))
    done = client.chat.completions.create(model=MODEL, messages=[user("q")])  # type: ignore[list-item]
    assert done.choices[0].message.content == "plain answer"
    upstream.enqueue(Scenario(content="streamed answer"))
    parts = client.chat.completions.create(
        model=MODEL,
        messages=[user("q"), assistant("plain answer"), user("again")],  # type: ignore[list-item]
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in parts if c.choices) == (
        "streamed answer"
    )


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_pass_through_with_their_status(
    proxy: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    _, token = proxy.create_token(**OFF)
    upstream.enqueue(Scenario(status=429, error_body={"error": {"message": "slow down"}}))
    reply = proxy.chat(token, model=MODEL, messages=[user("q")], stream=stream)
    assert reply.status_code == 429
    assert reply.json() == {"error": {"message": "slow down"}}


def test_mid_stream_failure_ends_with_an_in_band_error(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token(**OFF)
    upstream.enqueue(Scenario(content="one two three four five", disconnect_after_chunks=3))
    response, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("count")]})
    assert response.status_code == 200
    assert raw.startswith(upstream.sent_bytes[-1])
    events = sse_data(raw)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["type"] == "upstream_stream_error"


def test_off_with_long_term_settings_is_rejected_and_creates_nothing(proxy: Proxy) -> None:
    before = proxy.admin("GET", "/tokens").json()
    reply = proxy.admin(
        "POST",
        "/tokens",
        json={
            "name": "conflict",
            "llm_base_url": proxy.upstream_url,
            "memory_llm_provider": "openai",
            "memory_llm_base_url": proxy.upstream_url,
            "embed_provider": "openai",
            "embed_base_url": proxy.upstream_url,
            "embed_dims": 8,
            **OFF,
        },
    )
    assert reply.status_code == 422
    assert "memory.mode" in reply.json()["error"]["message"]
    assert proxy.admin("GET", "/tokens").json() == before


def test_patching_a_token_to_off_stops_injection(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token()
    session = {"X-Session-Id": "s"}
    proxy.chat(token, headers=session, model=MODEL, messages=[user("remember me")])
    proxy.chat(token, headers=session, model=MODEL, messages=[user("again")])
    assert len(upstream.chat_requests[-1].json["messages"]) > 1  # history was injected

    patched = proxy.admin("PATCH", f"/tokens/{token_id}", json=OFF)
    assert patched.status_code == 200, patched.text
    rows = len(stored_rows(proxy))
    proxy.chat(token, headers=session, model=MODEL, messages=[user("third")])
    assert upstream.chat_requests[-1].json["messages"] == [user("third")]
    assert len(stored_rows(proxy)) == rows


def test_http_proxy_from_the_environment_is_used_for_the_upstream(
    tmp_path: Path,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fake upstream plays the HTTP proxy: an absolute-form request for a host that does not
    # resolve can only reach it through the proxy setting.
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", upstream_server[1])
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")  # the test's own calls go direct
    server, proxy = start_proxy(tmp_path / "data", "http://llm.invalid")
    try:
        _, token = proxy.create_token(**OFF)
        reply = proxy.chat(token, model=MODEL, messages=[user("via proxy")])
        assert reply.status_code == 200, reply.text
        assert upstream.chat_requests[-1].headers["host"] == "llm.invalid"
    finally:
        server.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_completed_requests_leave_no_cyclic_garbage_behind(
    proxy: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    """Each request's disconnect watcher ends by itself once the response is complete: no
    cancelled task whose traceback ties the request's objects into a cycle that only the
    (stop-the-world) collector could free."""
    import gc

    from memory_bridge.http.chat_routes import _DisconnectWatcher

    _, token = proxy.create_token(**OFF)
    raw = json.dumps({"model": MODEL, "messages": [user("hi")], "stream": stream}).encode()
    with httpx.Client(timeout=30) as client:  # one kept-alive connection, like an agent's
        headers = auth(token, **{"content-type": "application/json"})
        url = f"{proxy.url}/v1/chat/completions"
        assert client.post(url, content=raw, headers=headers).status_code == 200
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(20):
                assert client.post(url, content=raw, headers=headers).status_code == 200
            gc.collect()
            leaked = [o for o in gc.garbage if isinstance(o, _DisconnectWatcher)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert leaked == []
