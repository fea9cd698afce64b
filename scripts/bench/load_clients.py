"""The load generator's HTTP clients (see `loadgen.py`): `raw`, a minimal HTTP/1.1 keep-alive
client on an asyncio protocol and httptools, and `httpx`, the cross-check."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

REQUEST_TIMEOUT = 60.0
SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly."
USER_PROMPT = "Say hello to the benchmark, please."
_session_ids = itertools.count(1)
# Every request asks a question of its own: a memory target then embeds and searches each one,
# as with a real conversation, rather than finding the first request's vector in the local
# embedder's recent-query cache (which made the query's embedding free after one request).
_questions = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    host: str
    port: int
    path: str
    key: str
    session: str | None  # None, "fresh", or a fixed session id

    @classmethod
    def parse(cls, name: str, spec: dict[str, Any]) -> Target:
        url = urlsplit(spec["url"])
        return cls(
            name=name,
            host=url.hostname or "127.0.0.1",
            port=url.port or 80,
            path=url.path.rstrip("/") + "/chat/completions",
            key=spec["key"],
            session=spec.get("session"),
        )

    def session_id(self) -> str | None:
        if self.session == "fresh":
            return f"bench-fresh-{next(_session_ids)}"
        return self.session


def chat_body(delay_ms: int, stream: bool) -> bytes:
    question = f"{USER_PROMPT} This is request {next(_questions)}."
    body = {
        "model": f"bench-delay-{delay_ms}",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        "max_tokens": 64,
        "stream": stream,
    }
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class Outcome:
    ok: bool
    status: int
    total: float  # seconds, request written → last byte
    ttfb: float  # seconds, request written → first body byte
    end: float  # perf_counter() at the last byte
    overhead_ms: float | None = None
    body: bytes = b""
    error: str | None = None


class Client(Protocol):
    async def send(self, stream: bool, delay_ms: int, capture: bool = False) -> Outcome: ...

    async def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# The raw client: asyncio protocol + httptools.


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        import httptools

        self._errors: tuple[type[Exception], ...] = (httptools.HttpParserError,)
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.reset(False)

    def reset(self, capture: bool) -> None:
        self.capture = capture
        self.status = 0
        self.first = 0.0
        self.end = 0.0
        self.received = 0
        self.overhead: float | None = None
        self.parts: list[bytes] = []
        self.keep_alive = True

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        try:
            self.parser.feed_data(data)
        except self._errors as exc:
            self._fail(ConnectionError(f"bad response: {exc}"))
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"connection closed ({exc or 'eof'})"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-memorybridge-overhead-ms":
            self.overhead = float(value)

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if not self.first:
            self.first = time.perf_counter()
        if self.capture:
            self.parts.append(body)

    def on_message_complete(self) -> None:
        self.end = time.perf_counter()
        self.keep_alive = self.parser.should_keep_alive()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)


class RawClient:
    """One kept-alive connection, used by one worker at a time."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.conn: _Connection | None = None
        t = target
        self.head = (
            f"POST {t.path} HTTP/1.1\r\nHost: {t.host}:{t.port}\r\n"
            f"Authorization: Bearer {t.key}\r\nContent-Type: application/json\r\n"
            "Accept: application/json\r\n"
        ).encode()

    def _request(self, stream: bool, delay_ms: int) -> bytes:
        body = chat_body(delay_ms, stream)
        extra = f"Content-Length: {len(body)}\r\n"
        session = self.target.session_id()
        if session is not None:
            extra += f"X-Session-Id: {session}\r\n"
        return self.head + extra.encode() + b"\r\n" + body

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.target.host, self.target.port)
        return conn

    async def send(self, stream: bool, delay_ms: int, capture: bool = False) -> Outcome:
        data = self._request(stream, delay_ms)
        for attempt in (1, 2):
            reused = self.conn is not None and not self.conn.closed
            if not reused:
                self.conn = await self._connect()
            conn = self.conn
            assert conn is not None and conn.transport is not None
            conn.reset(capture)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            conn.waiter = waiter
            started = time.perf_counter()
            conn.transport.write(data)
            try:
                await asyncio.wait_for(waiter, REQUEST_TIMEOUT)
            except (ConnectionError, TimeoutError) as exc:
                conn.transport.close()
                self.conn = None
                # A kept-alive connection the server closed as we reused it: try once more.
                if attempt == 1 and reused and conn.received == 0:
                    continue
                now = time.perf_counter()
                return Outcome(False, 0, now - started, 0.0, now, error=str(exc) or repr(exc))
            if not conn.keep_alive:
                conn.transport.close()
                self.conn = None
            end = conn.end
            first = conn.first or end
            return Outcome(
                ok=conn.status == 200,
                status=conn.status,
                total=end - started,
                ttfb=first - started,
                end=end,
                overhead_ms=conn.overhead,
                body=b"".join(conn.parts),
                error=None if conn.status == 200 else f"HTTP {conn.status}",
            )
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()
        self.conn = None


# ---------------------------------------------------------------------------------------------
# The httpx client (cross-check).


class HttpxClient:
    def __init__(self, target: Target, shared: Any) -> None:
        self.target = target
        self.client = shared
        self.url = f"http://{target.host}:{target.port}{target.path}"

    async def send(self, stream: bool, delay_ms: int, capture: bool = False) -> Outcome:
        headers = {"authorization": f"Bearer {self.target.key}", "content-type": "application/json"}
        session = self.target.session_id()
        if session is not None:
            headers["x-session-id"] = session
        body = chat_body(delay_ms, stream)
        started = time.perf_counter()
        first = 0.0
        parts: list[bytes] = []
        try:
            async with self.client.stream("POST", self.url, headers=headers, content=body) as r:
                async for chunk in r.aiter_raw():
                    if not first:
                        first = time.perf_counter()
                    if capture:
                        parts.append(chunk)
                end = time.perf_counter()
                overhead = r.headers.get("x-memorybridge-overhead-ms")
                status = r.status_code
        except Exception as exc:
            now = time.perf_counter()
            return Outcome(False, 0, now - started, 0.0, now, error=f"{type(exc).__name__}: {exc}")
        return Outcome(
            ok=status == 200,
            status=status,
            total=end - started,
            ttfb=(first or end) - started,
            end=end,
            overhead_ms=float(overhead) if overhead else None,
            body=b"".join(parts),
            error=None if status == 200 else f"HTTP {status}",
        )

    async def close(self) -> None:
        """The shared AsyncClient stays open for the next measurement."""
