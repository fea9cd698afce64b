"""The fake upstream's recording and transport core, shared by every API it serves.

`Recorder` keeps what a test looks at: ``requests`` (each as `Recorded`), ``sent_bytes`` (each
shaped body as planned before sending) and ``cancelled`` (clients that left before the answer
was complete). The server runs in another thread: everything but ``cancelled`` is recorded
*before* the response is sent, so it is complete once the client has seen the response;
``cancelled`` happens after the client left, hence ``wait_cancelled()``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Send

from tests.fakes.upstream.scenario import Scenario


@dataclass(frozen=True)
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes
    json: Any  # parsed body, or None if it was not JSON
    query: str = ""


class SimulatedDisconnect(Exception):
    """Raised inside a streaming body to make uvicorn drop the connection mid-response."""


class _QuietSimulatedDisconnect(logging.Filter):
    """Drop uvicorn's "Exception in ASGI application" log for our deliberate aborts."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, SimulatedDisconnect):
                return False
            if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            else:
                break
        return True


logging.getLogger("uvicorn.error").addFilter(_QuietSimulatedDisconnect())


def error_object(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def error_reply(scenario: Scenario, headers: dict[str, str]) -> Response:
    """A scripted failure: ``error_body`` as raw bytes or JSON, an OpenAI error by default."""
    body = scenario.error_body
    if body is None:
        body = error_object(scenario.status, f"Fake upstream error {scenario.status}")
    if isinstance(body, bytes):
        return Response(body, scenario.status, headers, media_type="application/json")
    return JSONResponse(body, scenario.status, headers)


class _TrackedStream(StreamingResponse):
    """StreamingResponse that reports when it is cancelled before finishing (client gone)."""

    def __init__(self, content: AsyncIterator[bytes], on_abandon: Callable[[], None], **kw: Any):
        super().__init__(content, **kw)
        self._on_abandon = on_abandon

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except (asyncio.CancelledError, OSError):
            self._on_abandon()
            raise


async def _send_pieces(pieces: list[bytes], scenario: Scenario) -> AsyncIterator[bytes]:
    abort_after = scenario.disconnect_after_chunks
    for index, piece in enumerate(pieces):
        if abort_after is not None and index >= abort_after:
            break
        if index and scenario.chunk_delay:
            await asyncio.sleep(scenario.chunk_delay)
        yield piece
        await asyncio.sleep(0)  # let uvicorn write this piece on its own
    if abort_after is not None:
        # Response already started: uvicorn closes the transport without the final
        # zero-length chunk, so the client sees a truncated body.
        raise SimulatedDisconnect(f"simulated disconnect after {abort_after} chunks")


class Recorder:
    """Records requests and shapes bodies on the wire; `FakeUpstream` builds on it."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.sent_bytes: list[bytes] = []
        self.cancelled = 0
        self._cancel_cond = threading.Condition()

    def reset(self) -> None:
        self.requests.clear()
        self.sent_bytes.clear()
        with self._cancel_cond:
            self.cancelled = 0

    def wait_cancelled(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until ``cancelled >= count``; False on timeout."""
        with self._cancel_cond:
            return self._cancel_cond.wait_for(lambda: self.cancelled >= count, timeout)

    def _mark_cancelled(self) -> None:
        with self._cancel_cond:
            self.cancelled += 1
            self._cancel_cond.notify_all()

    async def _record(self, request: Request) -> Recorded:
        body = await request.body()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        recorded = Recorded(
            method=request.method,
            path=request.url.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            json=parsed,
            query=request.url.query,
        )
        self.requests.append(recorded)
        return recorded

    async def _wait(self, request: Request, seconds: float) -> bool:
        """Sleep, polling for client disconnect. False (and counted) if the client left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            while (remaining := deadline - loop.time()) > 0:
                if await request.is_disconnected():
                    self._mark_cancelled()
                    return False
                await asyncio.sleep(min(0.01, remaining))
        except asyncio.CancelledError:
            self._mark_cancelled()
            raise
        return True

    def _stream(
        self, pieces: list[bytes], scenario: Scenario, headers: dict[str, str], media_type: str
    ) -> Response:
        """Send ``pieces`` one write each (re-cut to ``chunk_size`` if set), as the scenario
        shapes them: delays between pieces, a broken-off connection."""
        if scenario.chunk_size is not None:
            body, size = b"".join(pieces), scenario.chunk_size
            pieces = [body[i : i + size] for i in range(0, len(body), size)]
        self.sent_bytes.append(b"".join(pieces[: scenario.disconnect_after_chunks]))
        return _TrackedStream(
            _send_pieces(pieces, scenario),
            on_abandon=self._mark_cancelled,
            headers=headers,
            media_type=media_type,
        )

    def _json(self, whole: dict[str, Any], scenario: Scenario, headers: dict[str, str]) -> Response:
        """A JSON answer, chunked or gzip-compressed if the scenario asks for it."""
        if not (scenario.chunked_json or scenario.gzip_json):
            return JSONResponse(whole, headers=headers)
        body = json.dumps(whole, separators=(",", ":"), ensure_ascii=False).encode()
        if not scenario.gzip_json:
            return self._stream([body], scenario, headers, "application/json")
        self.sent_bytes.append(body)
        headers = {**headers, "content-encoding": "gzip"}
        return Response(gzip.compress(body), headers=headers, media_type="application/json")
