"""Small helpers shared by the chat-path integration tests."""

from __future__ import annotations

import json
import socket
import sqlite3
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import Proxy

Msg = dict[str, Any]


def user(text: str, **extra: Any) -> Msg:
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, **extra: Any) -> Msg:
    return {"role": "assistant", "content": text, **extra}


def system(text: str) -> Msg:
    return {"role": "system", "content": text}


def say(proxy: Proxy, token: str, text: str, session: str, end_user: str = "ada") -> None:
    """One user message of `end_user` in `session`, through the official SDK."""
    proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=end_user,
        extra_headers={"X-Session-Id": session},
    )


def auth(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


def stream_raw(
    proxy: Proxy, token: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, bytes]:
    """POST a streaming chat request and read the raw (undecoded) body bytes to the end."""
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/chat/completions",
        json={**body, "stream": True},
        headers=auth(token, **(headers or {})),
        timeout=30,
    ) as response:
        raw = b"".join(response.iter_raw())
    return response, raw


def sse_data(raw: bytes) -> list[str]:
    """The `data:` payloads of a well-formed SSE body (LF line endings)."""
    out = []
    for event in raw.decode().split("\n\n"):
        for line in event.split("\n"):
            if line.startswith("data:"):
                out.append(line[5:].removeprefix(" "))
    return out


def last_messages(upstream: FakeUpstream) -> list[Msg]:
    """The messages of the most recent chat request the upstream received."""
    messages: list[Msg] = upstream.chat_requests[-1].json["messages"]
    return messages


def injected(upstream: FakeUpstream, sent: list[Msg]) -> list[Msg]:
    """What the proxy put in front of the request's own messages (which must come last,
    unchanged). Only for requests without a system message."""
    forwarded = last_messages(upstream)
    assert forwarded[len(forwarded) - len(sent) :] == sent
    return forwarded[: len(forwarded) - len(sent)]


def stored_rows(proxy: Proxy) -> list[tuple[int, str, str, str, Msg]]:
    """Every stored history row: (token_id, user_id, session_id, role, body), oldest first."""
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    try:
        rows = db.execute(
            "select token_id, user_id, session_id, role, body from messages order by id"
        ).fetchall()
    finally:
        db.close()
    return [(t, u, s, r, json.loads(b)) for t, u, s, r, b in rows]


def closed_port_url() -> str:
    """A loopback URL on which nothing listens (connection refused)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def injected_counts(response: httpx.Response) -> dict[str, int]:
    """Parse `x-memorybridge-injected: history=2, ...`."""
    header = response.headers["x-memorybridge-injected"]
    pairs = (item.split("=", 1) for item in header.split(",") if item.strip())
    return {k.strip(): int(v) for k, v in pairs}
