"""Diagnostics that read right: `X-MemoryBridge-Injected` counts items per layer (one Gateway
hit is `gateway=1`, a failed Gateway recall `gateway=error`), and an upstream that cannot be
reached is logged with the failure's category and the request id, as its 502 says."""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.fakes.gateway import FakeGateway
from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import closed_port_url, user
from tests.support.hybrid_memory_support import gateway_memory
from tests.support.longterm_support import with_rid
from tests.support.proxy import Proxy


def _injected(reply: httpx.Response) -> dict[str, str]:
    assert reply.status_code == 200, reply.text
    header = reply.headers["x-memorybridge-injected"]
    return dict(item.strip().split("=", 1) for item in header.split(","))


def _ask(proxy: Proxy, token: str, text: str) -> httpx.Response:
    return proxy.chat(token, {"X-Session-Id": "s"}, model="m", messages=[user(text)])


def test_each_layer_counts_its_items(
    proxy: Proxy, upstream: FakeUpstream, gateway: FakeGateway, gw_url: str
) -> None:
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    assert proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content=b"# F").is_success
    gateway.set_results([{"id": "m1", "text": "likes tea", "score": 0.9}])
    first = _injected(_ask(proxy, token, "hello"))
    layers = ("curated", "history", "gateway", "longterm")
    assert {k: first[k] for k in layers} == {
        "curated": "1",
        "history": "0",
        "gateway": "1",
        "longterm": "0",
    }

    gateway.set_results([{"id": f"m{n}", "text": f"fact {n}", "score": 0.5} for n in range(3)])
    second = _injected(_ask(proxy, token, "again"))
    assert (second["history"], second["gateway"]) == ("2", "3")

    gateway.set_results([])
    assert _injected(_ask(proxy, token, "nothing?"))["gateway"] == "0"

    gateway.fail("/memories/search", "500")
    failed = _ask(proxy, token, "down?")
    assert _injected(failed)["gateway"] == "error"  # the request went on without it


def test_a_token_without_gateway_shows_zero(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    assert _injected(_ask(proxy, token, "hi"))["gateway"] == "0"
    unreachable = gateway_memory(closed_port_url())
    _, down = proxy.create_token(name="down", memory=unreachable)
    assert _injected(_ask(proxy, down, "hi"))["gateway"] == "error"


@pytest.mark.parametrize(
    ("base_url", "category"),
    [
        (None, "connect_failed"),  # a closed port: refused
        ("http://no-such-host.invalid/v1", "dns_error"),
    ],
)
def test_an_unreachable_upstream_is_logged_with_its_category_and_request_id(
    proxy: Proxy,
    upstream: FakeUpstream,
    logs: pytest.LogCaptureFixture,
    base_url: str | None,
    category: str,
) -> None:
    with_rid(logs)
    _, token = proxy.create_token(llm_base_url=base_url or closed_port_url())
    reply = _ask(proxy, token, "anyone there?")
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "upstream_unavailable"
    assert error["message"].startswith(f"The upstream LLM could not be reached ({category}: ")
    rid = reply.headers["x-request-id"]
    lines = [
        r
        for r in logs.records
        if r.levelno == logging.WARNING
        and f"upstream POST /v1/chat/completions failed ({category})" in r.getMessage()
    ]
    assert [r.rid for r in lines] == [rid]  # type: ignore[attr-defined]
