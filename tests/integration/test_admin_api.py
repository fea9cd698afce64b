"""The admin API as an operator uses it: create, read, update, rotate, delete, purge."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import UPSTREAM_KEY, Proxy

EMBED_KEY = "sk-embed-secret-abcdefghijkl"
MEMORY_KEY = "sk-memory-llm-secret-zyxwvut"


def _chat(proxy: Proxy, token: str, text: str = "hi", **headers: str) -> httpx.Response:
    return proxy.chat(token, headers, model="m", messages=[{"role": "user", "content": text}])


def test_create_returns_the_secret_once_and_masks_every_key(proxy: Proxy) -> None:
    reply = proxy.admin(
        "POST",
        "/tokens",
        json={
            "name": "agent",
            "llm_base_url": proxy.upstream_url + "/v1/",
            "llm_api_key": UPSTREAM_KEY,
            "embed_api_key": EMBED_KEY,
            "memory_llm_api_key": MEMORY_KEY,
            "memory_llm_body": {
                "model": "x",
                "api_key": "sk-hidden-in-body-123456",
                "max_tokens": 9,
            },
        },
    )
    assert reply.status_code == 201
    data = reply.json()
    assert data["token"].startswith("mb-") and len(data["token"]) > 40
    assert isinstance(data["id"], int) and data["name"] == "agent"
    config = data["config"]
    assert config["llm_api_key"] == "sk-...6789"
    assert config["llm_base_url"] == proxy.upstream_url + "/v1"
    assert config["memory_llm_body"] == {"model": "x", "api_key": "sk-...3456", "max_tokens": 9}
    assert config["session_window_size"] == 20 and config["memory_limit"] == 5
    for secret in (UPSTREAM_KEY, EMBED_KEY, MEMORY_KEY, "sk-hidden-in-body-123456"):
        assert secret not in reply.text

    shown = proxy.admin("GET", f"/tokens/{data['id']}")
    listed = proxy.admin("GET", "/tokens")
    for later in (shown, listed):
        assert later.status_code == 200
        assert data["token"] not in later.text
        for secret in (UPSTREAM_KEY, EMBED_KEY, MEMORY_KEY):
            assert secret not in later.text
    assert shown.json()["config"] == config
    assert [t["id"] for t in listed.json()["data"]] == [data["id"]]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"name": ""}, "name"),
        ({"llm_base_url": "   "}, "llm_base_url"),
        ({"llm_base_url": "ftp://x"}, "llm_base_url"),
        ({"llm_api_key": ""}, "llm_api_key"),
        ({"session_window_size": 0}, "session_window_size"),
        ({"session_window_size": -3}, "session_window_size"),
        ({"session_window_size": "20"}, "session_window_size"),
        ({"memory_limit": 0}, "memory_limit"),
        ({"memory_limit": True}, "memory_limit"),
        ({"embed_dims": 0}, "embed_dims"),
        ({"memory_llm_body": '{"model": 1}'}, "memory_llm_body"),
        ({"embed_body": [1, 2]}, "embed_body"),
        ({"memory": "hybrid"}, "memory"),
        ({"template": "fr"}, "template"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_invalid_config_is_422_naming_the_field_and_stores_nothing(
    proxy: Proxy, patch: dict[str, Any], field: str
) -> None:
    body = {"name": "t", "llm_base_url": proxy.upstream_url, **patch}
    reply = proxy.admin("POST", "/tokens", json=body)
    assert reply.status_code == 422, reply.text
    assert field in reply.json()["error"]["message"]
    assert proxy.admin("GET", "/tokens").json()["data"] == []

    token_id, _ = proxy.create_token(name="good")
    before = proxy.admin("GET", f"/tokens/{token_id}").json()
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json=patch)
    assert reply.status_code == 422
    assert field in reply.json()["error"]["message"]
    assert proxy.admin("GET", f"/tokens/{token_id}").json() == before


def test_missing_llm_base_url_and_bad_json_are_rejected(proxy: Proxy) -> None:
    reply = proxy.admin("POST", "/tokens", json={"name": "t"})
    assert reply.status_code == 422 and "llm_base_url" in reply.json()["error"]["message"]
    reply = proxy.admin("POST", "/tokens", content=b"{not json")
    assert reply.status_code == 400
    reply = proxy.admin("POST", "/tokens", json=["a"])
    assert reply.status_code == 422
    assert proxy.admin("GET", "/tokens").json()["data"] == []


def test_patch_is_partial_and_null_clears_optional_fields(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token(session_window_size=4, memory_prompt="facts only")
    reply = proxy.admin(
        "PATCH", f"/tokens/{token_id}", json={"name": "renamed", "memory_prompt": None}
    )
    assert reply.status_code == 200
    config = reply.json()["config"]
    assert config["name"] == "renamed" and config["session_window_size"] == 4
    assert "memory_prompt" not in config
    assert (
        proxy.admin("PATCH", f"/tokens/{token_id}", json={"llm_base_url": None}).status_code == 422
    )

    # The change applies to the very next request (the auth cache is invalidated).
    proxy.admin("PATCH", f"/tokens/{token_id}", json={"llm_api_key": "sk-new-upstream-key-999999"})
    assert _chat(proxy, token).status_code == 200
    assert (
        upstream.chat_requests[-1].headers["authorization"] == "Bearer sk-new-upstream-key-999999"
    )


def test_unknown_ids_are_404(proxy: Proxy) -> None:
    for method, path in [
        ("GET", "/tokens/999"),
        ("PATCH", "/tokens/999"),
        ("DELETE", "/tokens/999"),
        ("POST", "/tokens/999/rotate"),
    ]:
        reply = proxy.admin(method, path, json={"name": "x"} if method == "PATCH" else None)
        assert reply.status_code == 404, (method, path)
        assert reply.json()["error"]["type"] == "not_found_error"
    assert proxy.admin("GET", "/tokens/abc").status_code == 422


def test_rotation_keeps_the_id_and_the_memories(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, old = proxy.create_token()
    assert _chat(proxy, old, "remember me").status_code == 200
    reply = proxy.admin("POST", f"/tokens/{token_id}/rotate")
    assert reply.status_code == 200
    new = reply.json()["token"]
    assert reply.json()["id"] == token_id and new != old
    assert _chat(proxy, old).status_code == 401
    assert _chat(proxy, new, "again").status_code == 200
    contents = [m["content"] for m in upstream.chat_requests[-1].json["messages"]]
    assert contents[0] == "remember me"


def test_delete_stops_the_token_and_purge_removes_its_sessions(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    kept_id, kept = proxy.create_token(name="kept")
    gone_id, gone = proxy.create_token(name="gone")
    for token in (kept, gone):
        assert _chat(proxy, token, "hello").status_code == 200
    assert proxy.admin("DELETE", f"/tokens/{gone_id}?purge=true").status_code == 204
    assert _chat(proxy, gone).status_code == 401
    assert proxy.admin("GET", f"/tokens/{gone_id}").status_code == 404

    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    counts = dict(
        db.execute("select token_id, count(*) from messages group by token_id").fetchall()
    )
    logged = dict(
        db.execute("select token_id, count(*) from memory_events group by token_id").fetchall()
    )
    db.close()
    assert counts == {kept_id: 2}
    assert logged == {kept_id: 2}  # session.started + session.appended: the log purged too

    # Without purge the history stays (an id is never reused, so nobody can read it).
    assert proxy.admin("DELETE", f"/tokens/{kept_id}").status_code == 204
    new_id, _ = proxy.create_token(name="new")
    assert new_id not in (kept_id, gone_id)


def test_a_corrupted_row_makes_the_token_unusable_not_the_server(proxy: Proxy) -> None:
    token_id, token = proxy.create_token()
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    db.execute(
        "update tokens set config = ? where id = ?", ('{"name": "x", "memory_limit": 0}', token_id)
    )
    db.commit()
    db.close()
    asyncio.run(asyncio.sleep(0))
    # The cache may still hold the old config until it is invalidated or expires; a rotate
    # invalidates it, and the new secret must then be refused.
    token = proxy.admin("POST", f"/tokens/{token_id}/rotate").json()["token"]
    assert _chat(proxy, token).status_code == 401
    detail = proxy.admin("GET", f"/tokens/{token_id}")
    assert detail.status_code == 200
    assert detail.json()["usable"] is False and "llm_base_url" in detail.json()["config_error"]
    assert proxy.admin("GET", "/tokens").status_code == 200
    repaired = proxy.admin(
        "PATCH", f"/tokens/{token_id}", json={"name": "fixed", "llm_base_url": proxy.upstream_url}
    )
    assert repaired.status_code == 200 and repaired.json()["usable"] is True
    assert _chat(proxy, token).status_code == 200
