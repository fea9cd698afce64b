"""Small helpers shared by the Responses API integration tests."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import auth
from tests.support.proxy import Proxy

MODEL = "gpt-4o-mini"
Item = dict[str, Any]


def post(
    proxy: Proxy,
    token: str,
    body: dict[str, Any] | bytes,
    session: str | None = "s",
    **headers: str,
) -> httpx.Response:
    """POST /v1/responses as a raw client would (a dict is sent as JSON)."""
    if session is not None:
        headers["X-Session-Id"] = session
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{proxy.url}/v1/responses",
        content=content,
        headers=auth(token, **{"content-type": "application/json", **headers}),
        timeout=30,
    )


def stream_raw(
    proxy: Proxy, token: str, body: dict[str, Any], session: str = "s"
) -> tuple[httpx.Response, bytes]:
    """A streaming Responses request; the raw body bytes, read to the end."""
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/responses",
        json={**body, "stream": True},
        headers=auth(token, **{"X-Session-Id": session}),
        timeout=30,
    ) as response:
        raw = b"".join(response.iter_raw())
    return response, raw


def forwarded(upstream: FakeUpstream) -> dict[str, Any]:
    """The body of the last Responses request the upstream received."""
    body: dict[str, Any] = upstream.responses_requests[-1].json
    return body


def msg(role: str, content: Any) -> Item:
    """A message item as the proxy writes injected ones."""
    return {"type": "message", "role": role, "content": content}


def sse_events(raw: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """`(event name, data)` of each event of a well-formed stream (LF line endings)."""
    out = []
    for block in raw.decode().split("\n\n"):
        name = None
        data = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            out.append((name, json.loads("\n".join(data))))
    return out
