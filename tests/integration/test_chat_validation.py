"""Every validation rule of the chat path: our own 4xx in the OpenAI error shape, naming the
problem, and the upstream never called."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import auth, user
from tests.support.proxy import Proxy, start_proxy

MODEL = "gpt-4o-mini"


@pytest.fixture(scope="module")
def rejecting(
    tmp_path_factory: pytest.TempPathFactory, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[tuple[Proxy, str]]:
    """One proxy and token for the tests that only send rejected requests (nothing is stored,
    so they cannot influence each other); saves a server start per case."""
    server, proxy = start_proxy(tmp_path_factory.mktemp("rejecting"), upstream_server[1])
    try:
        yield proxy, proxy.create_token()[1]
    finally:
        server.stop()


INVALID_BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "messages missing": ({"model": MODEL}, "messages"),
    "messages empty": ({"model": MODEL, "messages": []}, "messages"),
    "messages not a list": ({"model": MODEL, "messages": {"role": "user"}}, "messages"),
    "message not an object": ({"model": MODEL, "messages": ["hi"]}, "messages[0]"),
    "unknown role": (
        {"model": MODEL, "messages": [user("ok"), {"role": "robot", "content": "x"}]},
        "messages[1].role",
    ),
    "missing role": ({"model": MODEL, "messages": [{"content": "x"}]}, "messages[0].role"),
    "tool without tool_call_id": (
        {"model": MODEL, "messages": [{"role": "tool", "content": "42"}]},
        "messages[0].tool_call_id",
    ),
    "content int": (
        {"model": MODEL, "messages": [{"role": "user", "content": 42}]},
        "messages[0].content",
    ),
    "content dict": (
        {"model": MODEL, "messages": [{"role": "user", "content": {"text": "hi"}}]},
        "messages[0].content",
    ),
    "content part without type": (
        {"model": MODEL, "messages": [{"role": "user", "content": [{"text": "hi"}]}]},
        "messages[0].content",
    ),
    "user content missing": ({"model": MODEL, "messages": [{"role": "user"}]}, "messages[0]"),
    "user not a string": ({"model": MODEL, "messages": [user("hi")], "user": 42}, "user"),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(INVALID_BODIES))
def test_invalid_messages_are_422_and_never_forwarded(
    rejecting: tuple[Proxy, str], upstream: FakeUpstream, case: str, stream: bool
) -> None:
    body, names = INVALID_BODIES[case]
    proxy, token = rejecting
    reply = proxy.chat(token, **{**body, "stream": stream})
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert names in error["message"]
    assert error["request_id"] == reply.headers["x-request-id"]
    assert upstream.chat_requests == []


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"{not json", 400),
        (b"", 400),
        (b"\xff\xfe\x00garbage", 400),
        (b'{"model": "m", "messages": "\xc3\x28"}', 422),
        (b'[{"role": "user", "content": "hi"}]', 400),
        (b'"just a string"', 400),
    ],
)
def test_body_that_is_not_a_json_object(
    rejecting: tuple[Proxy, str], upstream: FakeUpstream, raw: bytes, status: int
) -> None:
    proxy, token = rejecting
    reply = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers=auth(token, **{"content-type": "application/json"}),
        timeout=30,
    )
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "JSON" in error["message"]
    assert upstream.chat_requests == []


@pytest.mark.parametrize(
    ("headers", "names"),
    [
        ({"X-Session-Id": "s" * 201}, "X-Session-Id"),
        ({"X-User-Id": "u" * 201}, "user"),
        ({"X-Session-Id": "tab\there"}, "X-Session-Id"),
    ],
)
def test_scope_identifiers_are_bounded(
    rejecting: tuple[Proxy, str], upstream: FakeUpstream, headers: dict[str, str], names: str
) -> None:
    proxy, token = rejecting
    reply = proxy.chat(token, headers, model=MODEL, messages=[user("hi")])
    assert reply.status_code == 422
    assert names in reply.json()["error"]["message"]
    assert upstream.chat_requests == []


def test_long_body_user_is_rejected_and_limits_are_inclusive(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    too_long = proxy.chat(token, model=MODEL, messages=[user("hi")], user="u" * 201)
    assert too_long.status_code == 422
    assert upstream.chat_requests == []
    at_limit = proxy.chat(
        token, {"X-Session-Id": "s" * 200}, model=MODEL, messages=[user("hi")], user="u" * 200
    )
    assert at_limit.status_code == 200
    assert len(upstream.chat_requests) == 1


def test_valid_edge_shapes_are_accepted(proxy: Proxy, upstream: FakeUpstream) -> None:
    """What must *not* be rejected: assistant with tool_calls and null content, developer
    role, content parts, a tool message with its id."""
    _, token = proxy.create_token()
    messages = [
        {"role": "developer", "content": "Be brief."},
        user("weather?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]
    reply = proxy.chat(token, model=MODEL, messages=messages)
    assert reply.status_code == 200, reply.text
    assert upstream.chat_requests[-1].json["messages"] == messages


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_other_methods_on_the_chat_path_are_405(
    rejecting: tuple[Proxy, str], upstream: FakeUpstream, method: str
) -> None:
    proxy, token = rejecting
    reply = httpx.request(
        method, f"{proxy.url}/v1/chat/completions", headers=auth(token), timeout=30
    )
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"
    assert reply.headers["x-request-id"] == reply.json()["error"]["request_id"]
    assert upstream.chat_requests == []
