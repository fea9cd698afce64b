"""Smaller privacy edges through the real proxy: an end user named in a header is decoded as
UTF-8 (one person, one spelling; bytes that are not UTF-8 are a clear 400), a trace past its
retention age is not served, and nothing below /docs answers a service token."""

from __future__ import annotations

import sqlite3

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import Proxy

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def _post(proxy: Proxy, token: str, headers: dict[str, bytes], **body: object) -> httpx.Response:
    return httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={**BODY, **body},
        headers={"Authorization": f"Bearer {token}".encode(), **headers},
        timeout=30,
    )


def test_a_header_user_is_utf8_and_the_same_person_as_the_body_user(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, token = proxy.create_token()
    by_header = _post(proxy, token, {"X-User-Id": "jürgen".encode(), "X-Session-Id": b"s"})
    assert by_header.status_code == 200, by_header.text
    by_body = _post(proxy, token, {"X-Session-Id": b"s"}, user="jürgen")
    assert by_body.status_code == 200, by_body.text
    # One end user: the second request got the first one's turn as history.
    sent = upstream.proxied_requests[-1].json["messages"]
    assert [m["content"] for m in sent].count("hello there") == 2
    users = proxy.admin("GET", f"/tokens/{token_id}/users").json()["data"]
    assert [(u["user"], u["messages"]) for u in users] == [("jürgen", 4)]
    sessions = {"X-Session-Id": "séance".encode()}
    assert _post(proxy, token, sessions, user="jürgen").status_code == 200
    listed = proxy.admin("GET", f"/tokens/{token_id}/sessions").json()["data"]
    assert {s["session"] for s in listed} == {"s", "séance"}

    count = len(upstream.proxied_requests)
    for name in ("X-User-Id", "X-Session-Id"):
        bad = _post(proxy, token, {name: b"j\xfcrgen"})  # latin-1, not UTF-8
        assert bad.status_code == 400, bad.text
        assert bad.json()["error"]["message"] == f"{name} must be UTF-8 text."
    assert len(upstream.proxied_requests) == count  # nothing forwarded, nothing stored
    users = proxy.admin("GET", f"/tokens/{token_id}/users").json()["data"]
    assert [u["user"] for u in users] == ["jürgen"]


def test_a_trace_past_its_retention_age_is_not_served(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token()
    assert proxy.admin(
        "PUT", f"/tokens/{token_id}/curated/memory", content=b"Sky: green"
    ).is_success
    reply = _post(proxy, token, {})
    request_id = reply.headers["x-request-id"]
    path = f"/tokens/{token_id}/traces/{request_id}"
    assert proxy.admin("GET", path).status_code == 200
    # Its time moved past the retention age (no prune has run since): not served.
    age = proxy.settings.trace_retention_seconds + 60
    db = sqlite3.connect(proxy.settings.resolved_database_url.split("///", 1)[1])
    try:
        with db:
            db.execute("update context_traces set created_at = created_at - ?", (age,))
    finally:
        db.close()
    assert proxy.admin("GET", path).status_code == 404


def test_nothing_below_docs_answers_a_service_token(proxy: Proxy) -> None:
    _, token = proxy.create_token()
    for path in ("/docs", "/docs/", "/docs/oauth2-redirect", "/docs/anything", "/openapi.json"):
        reply = httpx.get(f"{proxy.url}{path}", headers={"Authorization": f"Bearer {token}"})
        assert reply.status_code == 403, (path, reply.status_code)
        assert "swagger" not in reply.text.lower()
    admin = proxy.admin_headers
    # No page there for anyone (the API reference is /openapi.json, admin-only).
    assert httpx.get(f"{proxy.url}/docs", headers=admin).status_code == 404
    assert httpx.get(f"{proxy.url}/docs/oauth2-redirect", headers=admin).status_code == 404
    assert httpx.get(f"{proxy.url}/openapi.json", headers=admin).status_code == 200
