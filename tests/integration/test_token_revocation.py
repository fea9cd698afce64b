"""A token revoked by another process stops working once the auth cache entry expires.

Two proxies share one SQLite database: A is a real `memory-bridge serve` child with a short
`TOKEN_CACHE_TTL`; B is the app in this process, whose admin API deletes or rotates the
token. A's store is never told (each process invalidates only its own cache), so A must
notice by itself: by reading the database again once the cached entry has expired. No
duration is asserted: the check polls with a generous bound, and only a cache that never
expires (the bug this guards against) runs into it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from memory_bridge.server.app import create_app
from tests.fakes.upstream import FakeUpstream
from tests.support.loopback import LoopbackServer
from tests.support.proxy import Proxy, make_settings
from tests.support.serve import ServeProcess, init_data_dir, serve_env

CACHE_TTL = 0.5
REFUSED_WITHIN = 30.0  # a bound on the poll, far above the TTL; never a measured duration


@dataclass
class Pair:
    a: ServeProcess  # serves the token (and caches it)
    b: Proxy  # revokes it through its admin API

    def chat(self, token: str, text: str = "hello") -> httpx.Response:
        return httpx.post(
            f"{self.a.url}/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]},
            headers={"Authorization": f"Bearer {token}", "X-Session-Id": "revocation"},
            timeout=30,
            trust_env=False,
        )


@pytest.fixture
def pair(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Pair]:
    data = tmp_path / "data"
    env = serve_env(data, TOKEN_CACHE_TTL=str(CACHE_TTL))
    admin = init_data_dir(env, tmp_path)
    settings = make_settings(data, token_cache_ttl=CACHE_TTL)
    with (
        ServeProcess.start(env, tmp_path, name="proxy-a") as a,
        LoopbackServer(create_app(settings)) as server,
    ):
        b = Proxy(
            url=server.url, admin_token=admin, upstream_url=upstream_server[1], settings=settings
        )
        yield Pair(a, b)


def _works(reply: httpx.Response) -> None:
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "Hello from upstream"


def _refused_in_time(pair: Pair, token: str) -> httpx.Response:
    """Poll A with `token` until it answers 401; fail if it still serves it after the bound."""
    deadline = time.monotonic() + REFUSED_WITHIN
    while True:
        reply = pair.chat(token)
        if reply.status_code == 401:
            return reply
        assert reply.status_code == 200, reply.text  # still cached: served normally
        if time.monotonic() > deadline:
            raise AssertionError(
                f"proxy A still accepts a revoked token {REFUSED_WITHIN:.0f} s after it was "
                f"revoked (TOKEN_CACHE_TTL={CACHE_TTL}): its auth cache never expires"
            )
        time.sleep(0.05)


def _assert_unauthorised(reply: httpx.Response) -> None:
    error = reply.json()["error"]
    assert error["type"] == "authentication_error"
    assert error["request_id"] == reply.headers["x-request-id"]


def test_token_deleted_through_another_process_stops_working_after_the_ttl(
    pair: Pair, upstream: FakeUpstream
) -> None:
    token_id, token = pair.b.create_token(name="deleted-elsewhere")
    _, other = pair.b.create_token(name="bystander")
    _works(pair.chat(token))  # A has read the token from the shared database: it is cached
    _works(pair.chat(other))

    assert pair.b.admin("DELETE", f"/tokens/{token_id}").status_code == 204
    _assert_unauthorised(_refused_in_time(pair, token))
    forwarded = len(upstream.proxied_requests)
    assert pair.chat(token).status_code == 401  # and stays refused
    assert len(upstream.proxied_requests) == forwarded  # nothing forwarded for it
    _works(pair.chat(other))  # the other token is untouched


def test_token_rotated_through_another_process_old_secret_stops_after_the_ttl(
    pair: Pair,
) -> None:
    token_id, old = pair.b.create_token(name="rotated-elsewhere")
    _works(pair.chat(old))  # cached by A

    reply = pair.b.admin("POST", f"/tokens/{token_id}/rotate")
    assert reply.status_code == 200, reply.text
    new = reply.json()["token"]
    assert new != old
    _works(pair.chat(new))  # the new secret works on A at once (it was never cached)
    _assert_unauthorised(_refused_in_time(pair, old))
    _works(pair.chat(new))  # and keeps working
