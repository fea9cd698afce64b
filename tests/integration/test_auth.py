"""Every row of the auth table, through the real server."""

from __future__ import annotations

import sqlite3

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import Proxy

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _post(proxy: Proxy, path: str, token: str | None, **kw: object) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{proxy.url}{path}", headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def test_health_needs_no_token_and_carries_a_request_id(proxy: Proxy) -> None:
    reply = httpx.get(f"{proxy.url}/health")
    assert reply.status_code == 200
    assert reply.json() == {"status": "ok"}
    rid = reply.headers["x-request-id"]
    assert len(rid) == 8 and int(rid, 16) >= 0


def test_request_ids_differ_per_request(proxy: Proxy) -> None:
    ids = {httpx.get(f"{proxy.url}/health").headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/admin/tokens", "/v1/models"])
def test_missing_token_is_401(proxy: Proxy, path: str) -> None:
    reply = httpx.request(
        "GET" if path == "/v1/models" else "POST", f"{proxy.url}{path}", timeout=10
    )
    assert reply.status_code == 401
    error = reply.json()["error"]
    assert error["type"] == "authentication_error"
    assert error["request_id"] == reply.headers["x-request-id"]


@pytest.mark.parametrize("header", ["Bearer mb-not-a-real-token", "Basic abc", "Bearer", "mb-x"])
def test_unknown_or_malformed_token_is_401(proxy: Proxy, header: str) -> None:
    reply = httpx.post(
        f"{proxy.url}/v1/chat/completions", headers={"Authorization": header}, json=CHAT
    )
    assert reply.status_code == 401


def test_service_token_on_admin_is_403(proxy: Proxy) -> None:
    _, token = proxy.create_token()
    reply = httpx.get(f"{proxy.url}/v1/admin/tokens", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 403
    assert reply.json()["error"]["type"] == "permission_error"


def test_admin_token_on_chat_is_403(proxy: Proxy, upstream: FakeUpstream) -> None:
    reply = _post(proxy, "/v1/chat/completions", proxy.admin_token, json=CHAT)
    assert reply.status_code == 403
    assert upstream.chat_requests == []


def test_unknown_paths_still_need_auth(proxy: Proxy) -> None:
    assert httpx.get(f"{proxy.url}/docs").status_code == 401
    assert httpx.get(f"{proxy.url}/openapi.json").status_code == 401
    _, token = proxy.create_token()
    reply = httpx.get(f"{proxy.url}/nope", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "not_found_error"


def test_auth_does_not_fail_open_on_an_empty_database(tmp_path, upstream_server) -> None:  # type: ignore[no-untyped-def]
    """A server whose database holds no tokens at all still refuses everything."""
    from memory_bridge.server.app import create_app
    from tests.support.loopback import LoopbackServer
    from tests.support.proxy import make_settings

    settings = make_settings(tmp_path / "empty")
    with LoopbackServer(create_app(settings)) as server:
        for path in ("/v1/chat/completions", "/v1/admin/tokens"):
            assert httpx.post(f"{server.url}{path}", json=CHAT).status_code == 401
            assert (
                httpx.post(
                    f"{server.url}{path}", json=CHAT, headers={"Authorization": "Bearer mb-x"}
                ).status_code
                == 401
            )
        assert httpx.get(f"{server.url}/v1/admin/tokens").status_code == 401


def test_the_admin_reference_is_served_to_the_admin_token_only(proxy: Proxy) -> None:
    schema = httpx.get(f"{proxy.url}/openapi.json", headers=proxy.admin_headers)
    assert schema.status_code == 200
    assert "/v1/admin/tokens" in schema.json()["paths"]
    _, token = proxy.create_token()
    for path in ("/docs", "/openapi.json"):
        refused = httpx.get(f"{proxy.url}{path}", headers={"Authorization": f"Bearer {token}"})
        assert refused.status_code == 403


def test_a_failing_token_store_denies_in_the_openai_shape(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    """The store raising (here: its table gone underneath it) is a 503 of ours with the
    request id, never a pass and never a bare 500."""
    _, token = proxy.create_token()
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    try:
        db.execute("alter table tokens rename to tokens_gone")
        db.commit()
        for path, method in (("/v1/chat/completions", "POST"), ("/v1/admin/tokens", "GET")):
            # A secret the cache has never seen, so the store must be asked.
            for secret in (token + "x", "mb-never-issued"):
                reply = httpx.request(
                    method,
                    f"{proxy.url}{path}",
                    json=CHAT,
                    headers={"Authorization": f"Bearer {secret}"},
                    timeout=10,
                )
                assert reply.status_code == 503, reply.text
                assert reply.headers["content-type"] == "application/json"
                error = reply.json()["error"]
                assert error["request_id"] == reply.headers["x-request-id"]
                assert secret not in reply.text
        assert upstream.chat_requests == []
        assert httpx.get(f"{proxy.url}/health").status_code == 200
    finally:
        db.execute("alter table tokens_gone rename to tokens")
        db.commit()
        db.close()
