"""The Responses API through the proxy, as plain ASGI endpoints like the chat path.

`POST /v1/responses` is a turn with memory (`chat.formats.RESPONSES`). Every path below it —
`GET`/`DELETE /v1/responses/{id}`, `GET …/input_items`, `POST …/cancel`, and whatever else the
upstream serves there — is passed on to the token's upstream as it is: status, headers and
body (or event stream, for a streamed retrieve) come back unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from starlette.types import Receive, Scope, Send

from memory_bridge.chat.formats import RESPONSES
from memory_bridge.chat.handler import ChatHandler, ChatRequest, Outgoing
from memory_bridge.http.chat_routes import chat_request, send_whole, serve
from memory_bridge.http.errors import error_body

PATH = "/v1/responses"
PREFIX = PATH + "/"
_V1 = len("/v1/")
_ANY_METHOD = ("GET", "POST", "DELETE", "PUT", "PATCH")


async def responses(scope: Scope, receive: Receive, send: Send) -> None:
    await serve(scope, receive, send, _handle, _responses_request)


async def below_responses(scope: Scope, receive: Receive, send: Send) -> None:
    """Any request to a path under `/v1/responses/`, forwarded untouched."""
    if ".." in scope["path"].split("/"):
        # The upstream's URL parser would resolve it to a path outside `/v1/responses/`.
        error = error_body(404, "invalid_request_error", "Not Found")
        await send_whole(send, 404, [(b"content-type", b"application/json")], error)
        return
    # The path as the client wrote it (percent-escapes kept), with its query.
    raw = scope.get("raw_path") or scope["path"].encode()
    target = raw.decode("latin-1")[_V1:]
    if scope.get("query_string"):
        target += "?" + scope["query_string"].decode("latin-1")

    def forward(handler: ChatHandler, request: ChatRequest) -> Awaitable[Outgoing]:
        return handler.forward(request, scope["method"], target)

    await serve(scope, receive, send, forward, _responses_request, _ANY_METHOD)


def _handle(handler: ChatHandler, request: ChatRequest) -> Awaitable[Outgoing]:
    return handler.handle(request)


def _responses_request(scope: Scope, body: bytes) -> ChatRequest:
    return replace(chat_request(scope, body), wire=RESPONSES)
