"""The Responses API through the proxy, as plain ASGI endpoints like the chat path.

`POST /v1/responses` is a turn with memory (`chat.formats.RESPONSES`). Every path below it —
`GET`/`DELETE /v1/responses/{id}`, `GET …/input_items`, `POST …/cancel`, and whatever else the
upstream serves there — is passed on to the token's upstream as it is: status, headers and
body (or event stream, for a streamed retrieve) come back unchanged, but for the `instructions`
a response object echoes, which are the client's again (`chat.response_claims`).

A path below it names a stored response: it is forwarded only for the token that created that
response (`storage.response_owners`), and any other id is a 404 of ours, forwarded nowhere. The
two paths there that name no response (`input_tokens`, `compact`) take a `previous_response_id`
in their body instead, checked the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from starlette.types import Receive, Scope, Send

from memory_bridge.chat.formats import RESPONSES
from memory_bridge.chat.handler import ChatHandler, ChatRequest, Outgoing
from memory_bridge.chat.request_body import parse_responses_body
from memory_bridge.chat.response_claims import Echo, not_found
from memory_bridge.http.chat_routes import chat_request, send_whole, serve
from memory_bridge.http.errors import error_body

PATH = "/v1/responses"
PREFIX = PATH + "/"
_V1 = len("/v1/")
_ANY_METHOD = ("GET", "POST", "DELETE", "PUT", "PATCH")
# The paths below PREFIX that are no response's: their bodies may name one instead.
_NOT_IDS = frozenset({"input_tokens", "compact"})


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

    named = target[len(PREFIX) - _V1 :].split("?", 1)[0].split("/", 1)[0]

    def forward(handler: ChatHandler, request: ChatRequest) -> Awaitable[Outgoing]:
        return _forward_owned(handler, request, scope["method"], target, named)

    await serve(scope, receive, send, forward, _responses_request, _ANY_METHOD)


async def _forward_owned(
    handler: ChatHandler, request: ChatRequest, method: str, target: str, named: str
) -> Outgoing:
    """Forward a request below PREFIX if what it names is the token's own, else a 404."""
    claims = handler.claims
    if named in _NOT_IDS:
        if request.body:
            await claims.check_body(request.token_id, parse_responses_body(request.body))
        return await handler.forward(request, method, target)
    owned = await claims.owned(request.token_id, named)
    if owned is None:
        raise not_found()
    outgoing = await handler.forward(request, method, target, Echo(kept=owned.instructions))
    deleted = method == "DELETE" and target.split("?", 1)[0] == f"responses/{named}"
    if deleted and 200 <= outgoing.status < 300:
        await claims.owners.forget(request.token_id, named)
    return outgoing


def _handle(handler: ChatHandler, request: ChatRequest) -> Awaitable[Outgoing]:
    return handler.handle(request)


def _responses_request(scope: Scope, body: bytes) -> ChatRequest:
    return replace(chat_request(scope, body), wire=RESPONSES)
