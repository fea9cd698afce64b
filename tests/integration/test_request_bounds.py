"""Request bodies are bounded at the edge: size, time, rate, how many are read at once, and a
request head that trickles in. Each refusal is an OpenAI-shaped error with a request id, and a
refused request stores nothing."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from memory_bridge.cli.main import initialise
from memory_bridge.http.slow_heads import head_deadline_protocol
from memory_bridge.server.app import create_app
from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import auth, stored_rows, user
from tests.support.loopback import LoopbackServer
from tests.support.proxy import Proxy, make_settings, start_proxy

LIMIT = 64 * 1024


@pytest.fixture
def bounded(tmp_path: Path, upstream_server: tuple[FakeUpstream, str]) -> Iterator[Proxy]:
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        max_request_bytes=LIMIT,
        body_read_timeout=60.0,
        min_body_rate=1000,
    )
    try:
        yield proxy
    finally:
        server.stop()


def _assert_refused(reply: httpx.Response, status: int) -> None:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["request_id"] == reply.headers["x-request-id"]
    assert error["type"] in ("invalid_request_error", "service_unavailable")


def test_a_declared_body_over_the_limit_is_413_and_never_forwarded(
    bounded: Proxy, upstream: FakeUpstream
) -> None:
    token = bounded.create_token()[1]
    big = "x" * (LIMIT + 1)
    reply = bounded.chat(token, model="m", messages=[user(big)])
    _assert_refused(reply, 413)
    assert upstream.chat_requests == []
    assert stored_rows(bounded) == []


def test_a_chunked_body_over_the_limit_is_413(bounded: Proxy, upstream: FakeUpstream) -> None:
    token = bounded.create_token()[1]
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(64):
            sent += 4096
            yield b"y" * 4096
        yield b'"}]}'

    reply = httpx.post(
        f"{bounded.url}/v1/chat/completions", content=chunks(), headers=auth(token), timeout=30
    )
    _assert_refused(reply, 413)
    assert upstream.chat_requests == []
    assert stored_rows(bounded) == []


def test_an_admin_body_over_the_limit_is_413(bounded: Proxy) -> None:
    reply = bounded.admin("POST", "/tokens", content=b"{" + b" " * (LIMIT + 10) + b"}")
    _assert_refused(reply, 413)
    assert bounded.admin("GET", "/tokens").json()["data"] == []


def test_the_openai_sdk_sees_413_as_an_api_error(bounded: Proxy) -> None:
    token = bounded.create_token()[1]
    with pytest.raises(openai.APIStatusError) as caught:
        bounded.client(token).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "z" * (LIMIT * 2)}]
        )
    assert caught.value.status_code == 413


def _raw(proxy: Proxy) -> socket.socket:
    host, port = proxy.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_slower_than_the_minimum_rate_is_408_and_the_connection_closed(
    bounded: Proxy, upstream: FakeUpstream
) -> None:
    token = bounded.create_token()[1]
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"s" * 5000 + b'"}]}'
    sock = _raw(bounded)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body[:10])
    # Then one byte now and then, far below 1,000 bytes/s, until the server gives up.
    reply = b""
    sock.settimeout(0.3)
    for i in range(10, 50):  # the rule allows ~2 s here; this sends for ~12 s
        try:
            sock.sendall(body[i : i + 1])
            reply += sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        if reply:
            break
    sock.settimeout(3)
    with contextlib.suppress(ConnectionResetError, TimeoutError):
        reply += _read_all(sock)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'"request_id"' in reply
    assert upstream.chat_requests == []
    assert stored_rows(bounded) == []


def test_a_stalled_body_gives_up_its_reading_slot(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    # One reading slot and no rate rule: a stalled body holds the slot until its deadline.
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        max_reading_requests=1,
        body_read_timeout=20.0,
        min_body_rate=0,
    )
    try:
        token = proxy.create_token()[1]
        stalled = _raw(proxy)
        stalled.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n"
            f"content-length: 100\r\n\r\n{{".encode()
        )
        time.sleep(0.5)  # let the stalled request take the slot
        waiting = proxy.chat(token, model="m", messages=[user("hello")])
        _assert_refused(waiting, 503)
        stalled.close()
        # With the slot free again, a request goes through.
        done = proxy.chat(token, model="m", messages=[user("hello again")])
        assert done.status_code == 200, done.text
    finally:
        server.stop()


def test_a_request_head_that_trickles_in_is_408_and_closed(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str]
) -> None:
    settings = make_settings(tmp_path / "data")
    asyncio.run(initialise(settings))
    server = LoopbackServer(create_app(settings), http=head_deadline_protocol(1.0))
    url = server.start()
    try:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=30)
        sent = threading.Event()

        def trickle() -> None:
            for byte in b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: " + b"a" * 200:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.05)
            sent.set()

        worker = threading.Thread(target=trickle, daemon=True)
        worker.start()
        reply = _read_all(sock)
        sock.close()
        worker.join(timeout=30)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert not sent.is_set(), "the server waited for the whole trickling head"
        # A normal request on a new connection is served as usual.
        assert httpx.get(f"{url}/health").status_code == 200
    finally:
        server.stop()
