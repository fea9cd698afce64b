"""`POST /v1/chat/completions`: the proxied chat path, as a plain ASGI endpoint; and `serve`,
the plain ASGI way every proxied path answers (the Responses API's too, `responses_routes`).

The edge middleware hands these paths straight here, past FastAPI's routing and middleware
layers, because they are the hot path (docs/performance.md). One watcher task per request reads
the client's `http.disconnect` and cancels the request's task: the upstream call is abandoned
at once, wherever the handler is waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress

from starlette.types import Receive, Scope, Send

from memory_bridge.chat.handler import ChatHandler, ChatRequest, Outgoing
from memory_bridge.core.errors import ProxyError
from memory_bridge.http.errors import error_body
from memory_bridge.http.services import services_in
from memory_bridge.storage.tokens import Principal

log = logging.getLogger(__name__)

PATH = "/v1/chat/completions"
_JSON = [(b"content-type", b"application/json")]


class _DisconnectWatcher:
    """Cancels `task` when the client disconnects, until stopped.

    Once stopped, the watcher is not cancelled but left to end by itself: uvicorn answers its
    pending `receive()` with `http.disconnect` as soon as the response is complete or the
    connection is gone, whichever comes first (every path here ends in one of the two: a
    last message sent, a failed send, a server shutdown closing its connections). Cancelling
    it instead left a reference cycle per request (the CancelledError's traceback holds the
    watcher's frame, which holds both tasks, the server's request cycle and their frames):
    ~30 objects of cyclic garbage per request for the collector to find
    (docs/performance.md).
    """

    def __init__(self, receive: Receive, task: asyncio.Task[object]) -> None:
        self.fired = False
        self._stopped = False
        self._receive = receive
        self._task = task
        self._watch = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self._stopped:
            self.fired = True
            self._task.cancel()

    def stop(self) -> None:
        # Must happen before the last body message: the server reports the end of a complete
        # response as a disconnect too.
        self._stopped = True


Handle = Callable[[ChatHandler, ChatRequest], Awaitable[Outgoing]]


async def chat_completions(scope: Scope, receive: Receive, send: Send) -> None:
    await serve(scope, receive, send, _handle)


def _handle(handler: ChatHandler, request: ChatRequest) -> Awaitable[Outgoing]:
    return handler.handle(request)


async def serve(
    scope: Scope,
    receive: Receive,
    send: Send,
    handle: Handle,
    request: Callable[[Scope, bytes], ChatRequest] | None = None,
    methods: tuple[str, ...] = ("POST",),
) -> None:
    """Read the body, make the `ChatRequest` (`request`, by default a chat completion's), let
    `handle` answer it, and send the answer: whole, or streamed as it comes."""
    if scope["method"] not in methods:
        error = error_body(405, "invalid_request_error", "Method Not Allowed")
        allow = ", ".join(methods).encode()
        await send_whole(send, 405, [*_JSON, (b"allow", allow)], error)
        return
    body = await _read_body(receive)
    if body is None:
        return  # the client left while sending
    made = (request or chat_request)(scope, body)
    handler: ChatHandler = services_in(scope).chat
    task = asyncio.current_task()
    assert task is not None
    watcher = _DisconnectWatcher(receive, task)
    outgoing: Outgoing | None = None
    try:
        try:
            outgoing = await handle(handler, made)
        except ProxyError as exc:
            watcher.stop()
            error = error_body(exc.status, exc.type, exc.message)
            extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in exc.headers]
            await send_whole(send, exc.status, [*_JSON, *extra], error)
            return
        except Exception as exc:
            # The class only: a message or traceback could quote the token's config.
            log.error("unhandled %s", type(exc).__name__)
            watcher.stop()
            error = error_body(500, "internal_error", "Internal error.")
            await send_whole(send, 500, _JSON, error)
            return
        if outgoing.stream is None:
            watcher.stop()
            await send_whole(send, outgoing.status, outgoing.headers, outgoing.body)
            return
        await send(
            {"type": "http.response.start", "status": outgoing.status, "headers": outgoing.headers}
        )
        async for chunk in outgoing.stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        watcher.stop()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not watcher.fired:
            raise  # the server is shutting down, not ours to swallow
        task.uncancel()  # the client left: nobody to answer
    finally:
        watcher.stop()
        if outgoing is not None and outgoing.stream is not None:
            with suppress(Exception):
                await outgoing.stream.aclose()


def chat_request(scope: Scope, body: bytes) -> ChatRequest:
    state = scope["state"]
    principal: Principal = state["principal"]  # set by the edge middleware
    assert principal.config is not None
    return ChatRequest(
        request_id=state["request_id"],
        token_id=principal.token_id,
        config=principal.config,
        body=body,
        headers={k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]},
        started=state["started"],
    )


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
