"""The admin API refuses what it cannot serve or store with a 4xx in the OpenAI error shape:
ids beyond the database's range, unbounded paging, bodies that cannot be stored."""

from __future__ import annotations

import sqlite3

import httpx
import pytest

from tests.support.proxy import Proxy

MAX_ID = 2**63 - 1
TOKEN_ROUTES = [
    ("GET", "/tokens/{id}"),
    ("PATCH", "/tokens/{id}"),
    ("DELETE", "/tokens/{id}"),
    ("POST", "/tokens/{id}/rotate"),
    ("GET", "/tokens/{id}/curated/memory"),
    ("PUT", "/tokens/{id}/curated/user"),
    ("GET", "/tokens/{id}/events"),
    ("GET", "/tokens/{id}/memories"),
    ("DELETE", "/tokens/{id}/memories"),
    ("GET", "/tokens/{id}/memories/search?query=x"),
    ("GET", "/tokens/{id}/memories/0b6f6c1e-4f0a-4d2b-9a8e-3c1d2e5f7a90"),
    ("DELETE", "/tokens/{id}/memories/0b6f6c1e-4f0a-4d2b-9a8e-3c1d2e5f7a90"),
]


def _error(reply: httpx.Response, status: int) -> dict[str, object]:
    assert reply.status_code == status, (reply.request.method, reply.request.url, reply.text)
    assert reply.headers["content-type"] == "application/json"
    error: dict[str, object] = reply.json()["error"]
    assert error["code"] == status and error["request_id"] == reply.headers["x-request-id"]
    return error


def _stored_names(proxy: Proxy) -> list[str]:
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    try:
        return [row[0] for row in db.execute("select name from tokens where not is_admin")]
    finally:
        db.close()


@pytest.mark.parametrize(("method", "route"), TOKEN_ROUTES)
def test_ids_beyond_the_database_range_are_422_and_the_largest_is_404(
    proxy: Proxy, method: str, route: str
) -> None:
    body = b"{}" if method in ("PATCH", "PUT") else None
    for bad in (2**64, 2**63, 0, -1):
        reply = proxy.admin(method, route.format(id=bad), content=body)
        assert "token_id" in str(_error(reply, 422)["message"])
    _error(proxy.admin(method, route.format(id=MAX_ID), content=body), 404)


def test_a_405_names_every_method_of_the_path(proxy: Proxy) -> None:
    reply = proxy.admin("PUT", "/tokens")
    assert _error(reply, 405)["type"] == "invalid_request_error"
    # Starlette alone would name only the first route's methods (POST, or GET).
    assert reply.headers["allow"] == "GET, POST"
    reply = proxy.admin("OPTIONS", "/tokens/3")
    assert _error(reply, 405) and reply.headers["allow"] == "DELETE, GET, PATCH"
    # `search` is not a memory id (those are UUIDs): only its own GET is served there.
    reply = proxy.admin("DELETE", "/tokens/3/memories/search")
    assert _error(reply, 405) and reply.headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("path", "param"),
    [
        (f"/events?after={2**63}", "after"),
        ("/events?after=-1", "after"),
        ("/events?limit=0", "limit"),
        ("/events?limit=1001", "limit"),
        ("/events?session=" + "s" * 201, "session"),
        ("/events?session=a%00b", "session"),
        ("/events?type=x%0Ay", "type"),
        ("/curated/user?user=" + "u" * 201, "user"),
        ("/curated/user?user=%1B", "user"),
        ("/memories?offset=1000001", "offset"),
        ("/memories?limit=1001", "limit"),
        ("/memories?user=a%7Fb", "user"),
        ("/memories/search?query=x&limit=101", "limit"),
        ("/memories/search?query=" + "q" * 4001, "query"),
    ],
)
def test_query_parameters_are_bounded(proxy: Proxy, path: str, param: str) -> None:
    token_id, _ = proxy.create_token()
    error = _error(proxy.admin("GET", f"/tokens/{token_id}{path}"), 422)
    assert str(error["message"]).startswith(f"query.{param}:")


@pytest.mark.parametrize(
    ("raw", "status", "says"),
    [
        (b"[" * 5000 + b"]" * 5000, 422, "nested deeper"),
        (b'{"name": "x", "memory_llm_body": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, 422, "deeper"),
        (b'{"name": "\\udc80", "llm_base_url": "http://u"}', 422, "not valid Unicode"),
        (b'{"name": "a\\u0000b", "llm_base_url": "http://u"}', 422, "NUL"),
        (b'{"name": "x", "memory_limit": ' + b"9" * 5000 + b"}", 400, "not valid JSON"),
        (b'{"name": "\xff"}', 422, "UTF-8"),
    ],
)
def test_bodies_that_cannot_be_parsed_or_stored_are_refused_and_store_nothing(
    proxy: Proxy, raw: bytes, status: int, says: str
) -> None:
    token_id, _ = proxy.create_token(name="kept")
    for method, path in (("POST", "/tokens"), ("PATCH", f"/tokens/{token_id}")):
        error = _error(proxy.admin(method, path, content=raw), status)
        assert says in str(error["message"])
    assert _stored_names(proxy) == ["kept"]


def test_a_curated_document_with_nul_is_refused(proxy: Proxy) -> None:
    token_id, _ = proxy.create_token()
    path = f"/tokens/{token_id}/curated/memory"
    assert "NUL" in str(_error(proxy.admin("PUT", path, content=b"a\x00b"), 422)["message"])
    assert proxy.admin("GET", path).text == ""


def test_every_invalid_field_of_a_token_config_is_named_at_once(proxy: Proxy) -> None:
    body = {
        "name": "",
        "llm_base_url": "ftp://upstream",
        "memory_limit": 0,
        "limits": {"max_concurrent": -1},
        "colour": "blue",
    }
    for reply in (
        proxy.admin("POST", "/tokens", json=body),
        proxy.admin("PATCH", f"/tokens/{proxy.create_token()[0]}", json=body),
    ):
        message = str(_error(reply, 422)["message"])
        assert message.startswith("name: "), message
        for field in ("llm_base_url", "memory_limit", "limits.max_concurrent", "colour"):
            assert f"; {field}: " in message, message
    assert len(proxy.admin("GET", "/tokens").json()["data"]) == 1  # nothing else saved
