"""`POST /v1/chat/completions`: the proxied chat path."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from memory_bridge.chat.handler import ChatHandler, ChatRequest, ClientGone
from memory_bridge.http.auth import principal_of

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    principal = principal_of(request.scope)
    assert principal.config is not None
    handler: ChatHandler = request.app.state.chat

    async def wait_disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    chat = ChatRequest(
        request_id=request.scope["state"]["request_id"],
        token_id=principal.token_id,
        config=principal.config,
        body=await request.body(),
        headers=request.headers,
        started=request.scope["state"]["started"],
        wait_disconnect=wait_disconnect,
    )
    try:
        return await handler.handle(chat)
    except ClientGone:
        return Response(status_code=499)
