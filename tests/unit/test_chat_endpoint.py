"""The plain ASGI chat endpoint's own edges: a handler that fails unexpectedly, and a client
that leaves while still sending its body."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from memory_bridge.http.chat_routes import chat_completions
from memory_bridge.storage.tokens import Principal
from memory_bridge.tenancy.config import validate_config

SECRET = "sk-never-shown-0123456789"


class _Failing:
    def __init__(self) -> None:
        self.calls = 0

    async def handle(self, _request: Any) -> Any:
        self.calls += 1
        raise RuntimeError(f"bug holding {SECRET}")


def _scope(handler: Any) -> dict[str, Any]:
    config = validate_config({"name": "t", "llm_base_url": "http://up", "llm_api_key": SECRET})
    return {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"content-type", b"application/json")],
        "app": SimpleNamespace(state=SimpleNamespace(services=SimpleNamespace(chat=handler))),
        "state": {
            "request_id": "rid-1",
            "started": 0.0,
            "principal": Principal(token_id=1, is_admin=False, config=config),
        },
    }


def _receiver(*messages: dict[str, Any]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await asyncio.Event().wait()  # the client neither sends nor leaves
        raise AssertionError("unreachable")

    return receive


async def test_an_unexpected_handler_error_is_a_500_that_quotes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    handler = _Failing()
    body = {"type": "http.request", "body": b'{"messages": []}', "more_body": False}
    await chat_completions(_scope(handler), _receiver(body), send)
    assert handler.calls == 1
    assert sent[0]["status"] == 500
    error = json.loads(sent[1]["body"])["error"]
    assert error["type"] == "internal_error"
    assert SECRET not in sent[1]["body"].decode()
    assert SECRET not in caplog.text
    assert "RuntimeError" in caplog.text


async def test_a_client_leaving_mid_body_gets_nothing_and_reaches_no_handler() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    handler = _Failing()
    receive = _receiver(
        {"type": "http.request", "body": b'{"mess', "more_body": True},
        {"type": "http.disconnect"},
    )
    await chat_completions(_scope(handler), receive, send)
    assert handler.calls == 0
    assert sent == []
