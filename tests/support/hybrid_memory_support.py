"""Shared pieces of the hybrid-memory integration tests (curated memory + Memory Gateway).

The proxy is started per test (`Served`), so a test can stop it: stopping runs the lifespan's
shutdown, which drains the background work (Gateway add→flush). After `drain()` every Gateway
call the proxy was ever going to make has been made, which turns "no call happened" into a
deterministic assertion. Waiting for a call or an audit event that *should* happen is a bounded
poll, never a fixed sleep.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sqlite3
from pathlib import Path
from typing import Any

from memory_bridge.server.app import create_app
from tests.fakes.gateway import FakeGateway
from tests.support.chat_helpers import Msg, assistant, system, user
from tests.support.loopback import LoopbackServer
from tests.support.polling import wait_until as wait_until
from tests.support.proxy import Proxy, start_proxy

__all__ = ["assistant", "system", "user"]

MODEL = "gpt-4o-mini"
GW_USER = "gateway_test_user"
# Long enough that a partial mask (first 3 / last 4 characters) cannot reveal it, and
# distinctive enough that any fragment of it in a log line is unmistakable.
USER_KEY = "uk_live_TOPSECRET_9f8e7d6c5b4a3210"
CURATED_HEADER = "## Curated memory"
RECALL_LABEL = "[Memory Gateway recall"

EVENT_TYPES = (
    "memory_gateway_recall_succeeded",
    "memory_gateway_recall_failed",
    "memory_gateway_add_succeeded",
    "memory_gateway_add_failed",
    "memory_gateway_flush_succeeded",
    "memory_gateway_flush_failed",
)


def gateway_memory(base_url: str, *, mode: str | None = "hybrid", **overrides: Any) -> Msg:
    """A token's `memory` field pointing at `base_url` (camelCase, as documented)."""
    gateway: Msg = {"baseUrl": base_url, "userId": GW_USER, "userKey": USER_KEY}
    gateway.update(overrides)
    memory: Msg = {"gateway": gateway}
    if mode is not None:
        memory["mode"] = mode
    return memory


def events(proxy: Proxy, token_id: int, **params: Any) -> list[Msg]:
    reply = proxy.admin("GET", f"/tokens/{token_id}/events", params=params)
    assert reply.status_code == 200, reply.text
    data: list[Msg] = reply.json()["data"]
    return data


def wait_events(proxy: Proxy, token_id: int, count: int, **params: Any) -> list[Msg]:
    """At least `count` events matching `params` (e.g. type=..., session=...)."""
    return wait_until(
        lambda: found if len(found := events(proxy, token_id, **params)) >= count else None,
        f"{count} event(s) {params}",
    )


def wait_calls(gateway: FakeGateway, paths: list[str]) -> None:
    """Until the fake has recorded exactly these calls so far (a prefix is not enough)."""

    def check() -> bool:
        seen = [c.path for c in gateway.calls]
        assert seen == paths[: len(seen)], f"unexpected gateway calls {seen}, wanted {paths}"
        return seen == paths

    wait_until(check, f"gateway calls {paths}")


def system_text(messages: list[Msg]) -> str:
    """The text of the leading system message of a forwarded request ("" if none)."""
    if not messages or messages[0]["role"] != "system":
        return ""
    content = messages[0]["content"]
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content)
    return str(content)


def db_rows(proxy: Proxy, sql: str) -> list[tuple[Any, ...]]:
    """Rows straight from the proxy's SQLite file (works after the server was stopped too)."""
    db = sqlite3.connect(proxy.settings.memory_bridge_data_dir / "memory_bridge.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def stored_event_types(proxy: Proxy) -> list[str]:
    return [r[0] for r in db_rows(proxy, "select type from events order by id")]


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class Served:
    """One proxy under uvicorn for one test; `drain()` stops it after its background work."""

    def __init__(self, data_dir: Path, upstream_url: str, **overrides: Any) -> None:
        self.server: LoopbackServer | None
        self.server, self.proxy = start_proxy(data_dir, upstream_url, **overrides)

    def drain(self) -> None:
        """Stop the server; its lifespan shutdown waits for every queued Gateway add/flush."""
        if self.server is not None:
            server, self.server = self.server, None
            server.stop()

    def restart(self) -> None:
        """Stop (draining) and serve the same data directory again: a fresh process' view."""
        self.drain()
        self.server = LoopbackServer(create_app(self.proxy.settings))
        self.proxy = dataclasses.replace(self.proxy, url=self.server.start())
