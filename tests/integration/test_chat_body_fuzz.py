"""The chat endpoint's body handling under arbitrary input: never a 5xx, and a refused request
stores nothing and reaches no upstream. Strict rules (depth, Unicode, a repeated `messages`)
are driven one by one, then hypothesis throws everything else at the real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import auth, stored_rows, user
from tests.support.proxy import Proxy, start_proxy


@pytest.fixture(scope="module")
def fuzzed(
    tmp_path_factory: pytest.TempPathFactory, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[tuple[Proxy, str]]:
    server, proxy = start_proxy(tmp_path_factory.mktemp("fuzz") / "data", upstream_server[1])
    try:
        yield proxy, proxy.create_token()[1]
    finally:
        server.stop()


def _post(proxy: Proxy, token: str, raw: bytes, session: str = "fuzz") -> httpx.Response:
    headers = auth(token, **{"content-type": "application/json", "x-session-id": session})
    return httpx.post(f"{proxy.url}/v1/chat/completions", content=raw, headers=headers, timeout=30)


def _refused(reply: httpx.Response) -> None:
    assert 400 <= reply.status_code < 500, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["request_id"] == reply.headers["x-request-id"]


def _nested(depth: int) -> bytes:
    inner = b"[" * depth + b"]" * depth
    return b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": ' + inner + b"}"


@pytest.mark.parametrize("depth", [401, 990, 5000, 100_000])
def test_nesting_deeper_than_the_bound_is_422(
    fuzzed: tuple[Proxy, str], upstream: FakeUpstream, depth: int
) -> None:
    proxy, token = fuzzed
    reply = _post(proxy, token, _nested(depth))
    _refused(reply)
    assert reply.status_code == 422
    assert "nested" in reply.json()["error"]["message"]
    assert upstream.chat_requests == []


def test_nesting_within_the_bound_is_forwarded(
    fuzzed: tuple[Proxy, str], upstream: FakeUpstream
) -> None:
    proxy, token = fuzzed
    reply = _post(proxy, token, _nested(390), session="within-depth")
    assert reply.status_code == 200, reply.text
    assert len(upstream.chat_requests) == 1


def test_a_repeated_messages_key_is_422(fuzzed: tuple[Proxy, str], upstream: FakeUpstream) -> None:
    proxy, token = fuzzed
    raw = (
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}],'
        b' "messages": [{"role": "user", "content": "b"}]}'
    )
    reply = _post(proxy, token, raw)
    _refused(reply)
    assert "messages" in reply.json()["error"]["message"]
    assert upstream.chat_requests == []


def test_messages_inside_content_is_not_a_repeated_key(
    fuzzed: tuple[Proxy, str], upstream: FakeUpstream
) -> None:
    proxy, token = fuzzed
    body = {"model": "m", "messages": [user('say "messages" twice: "messages"')]}
    reply = _post(proxy, token, json.dumps(body).encode(), session="quoted-key")
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("with_history", [False, True])
def test_a_lone_surrogate_is_422_and_nothing_is_stored(
    fuzzed: tuple[Proxy, str], upstream: FakeUpstream, with_history: bool
) -> None:
    proxy, token = fuzzed
    session = f"surrogate-{with_history}"
    if with_history:
        ok = _post(
            proxy,
            token,
            json.dumps({"model": "m", "messages": [user("hi")]}).encode(),
            session=session,
        )
        assert ok.status_code == 200
    before = stored_rows(proxy)
    upstream.reset()
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "bad \\udc80 text"}]}'
    reply = _post(proxy, token, raw, session=session)
    _refused(reply)
    assert reply.status_code == 422
    assert "Unicode" in reply.json()["error"]["message"]
    assert upstream.chat_requests == []
    assert stored_rows(proxy) == before


def test_a_valid_surrogate_pair_is_text(fuzzed: tuple[Proxy, str], upstream: FakeUpstream) -> None:
    proxy, token = fuzzed
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    reply = _post(proxy, token, raw, session="pair")
    assert reply.status_code == 200, reply.text
    assert upstream.chat_requests[-1].json["messages"][-1]["content"] == "smile \U0001f600"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
messages = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "system", "tool", "robot", 5]),
            "content": json_values,
            "tool_calls": json_values,
            "tool_call_id": json_values,
            "name": json_values,
        },
    )
    | json_values,
    max_size=4,
)
bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "model": json_values,
            "messages": messages | json_values,
            "stream": json_values,
            "user": json_values,
            "tools": json_values,
        },
    )
    | json_values
)


def _encode(body: Any, mangle: int) -> bytes:
    raw = json.dumps(body).encode()
    if mangle == 1:  # cut short
        return raw[: len(raw) // 2]
    if mangle == 2:  # a byte that is never UTF-8
        return raw[:1] + b"\xff" + raw[1:]
    return raw


@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies, mangle=st.sampled_from([0, 0, 0, 1, 2]))
def test_arbitrary_bodies_never_get_a_5xx_and_refusals_store_nothing(
    fuzzed: tuple[Proxy, str], upstream_server: tuple[FakeUpstream, str], body: Any, mangle: int
) -> None:
    proxy, token = fuzzed
    fake = upstream_server[0]
    before_rows = len(stored_rows(proxy))
    before_calls = len(fake.chat_requests)
    reply = _post(proxy, token, _encode(body, mangle), session="hypothesis")
    assert reply.status_code < 500, reply.text
    if reply.status_code >= 400:
        _refused(reply)
        assert len(stored_rows(proxy)) == before_rows
        assert len(fake.chat_requests) == before_calls
