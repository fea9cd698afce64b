"""What the proxy adds to a Responses request it takes back out of what the client receives.

The fake upstream echoes `instructions` in every response object, as OpenAI does, so the curated
block the proxy places there would reach the client: through the real proxy with the openai
SDK, the client's own `instructions` come back (None when it sent none) in the JSON reply, in
every streamed event that carries the response object, and in a later retrieve, cancel or
streamed replay; no byte of the injected text reaches the client.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import auth
from tests.support.proxy import Proxy
from tests.support.responses_helpers import MODEL, forwarded, sse_events, stream_raw

CURATED = "Codename BLUEBIRD-7731."
SESSION: dict[str, Any] = {"extra_headers": {"X-Session-Id": "s"}}


def _token_with_curated(proxy: Proxy) -> str:
    token_id, token = proxy.create_token()
    put = proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content=CURATED)
    assert put.status_code == 204
    return token


@pytest.mark.parametrize("instructions", ["Be terse.", None, ""])
def test_a_json_reply_gives_back_the_clients_instructions(
    proxy: Proxy, upstream: FakeUpstream, instructions: str | None
) -> None:
    token = _token_with_curated(proxy)
    client = proxy.client(token)
    upstream.enqueue(Scenario(content="Hi", id="resp_json"))
    raw = client.responses.with_raw_response.create(
        model=MODEL, input="Hello", instructions=instructions, **SESSION
    )
    assert CURATED in forwarded(upstream)["instructions"]  # the proxy did place it there
    assert CURATED not in raw.text
    response = raw.parse()
    assert response.instructions == instructions
    assert response.output_text == "Hi"
    # A later retrieve or cancel of the stored response: the client's own again.
    assert client.responses.retrieve("resp_json").instructions == instructions
    cancelled = client.responses.with_raw_response.cancel("resp_json")
    assert CURATED not in cancelled.text and cancelled.parse().instructions == instructions


@pytest.mark.parametrize("status", ["completed", "incomplete", "failed"])
@pytest.mark.parametrize("instructions", ["Be terse.", None])
def test_every_streamed_response_object_gives_back_the_clients_instructions(
    proxy: Proxy, upstream: FakeUpstream, instructions: str | None, status: str
) -> None:
    token = _token_with_curated(proxy)
    upstream.enqueue(Scenario(content="streamed words", id="resp_s", response_status=status))
    body: dict[str, Any] = {"model": MODEL, "input": "Hello"}
    if instructions is not None:
        body["instructions"] = instructions
    reply, raw = stream_raw(proxy, token, body)
    assert reply.status_code == 200
    assert CURATED in forwarded(upstream)["instructions"]
    assert CURATED.encode() not in raw
    carried = [(name, data["response"]) for name, data in sse_events(raw) if "response" in data]
    kinds = [name for name, _ in carried]
    assert kinds == ["response.created", "response.in_progress", f"response.{status}"]
    assert all(response["instructions"] == instructions for _, response in carried)
    # Every other event is the upstream's, byte for byte.
    sent = b"".join(upstream.stored_responses["resp_s"][2] or [])
    others = [e for e in sent.split(b"\n\n") if e and b'"response"' not in e]
    assert others and all(e in raw for e in others)

    # A streamed replay of the stored response, with the SDK.
    replay = list(proxy.client(token).responses.retrieve("resp_s", stream=True))
    objects = [e.response for e in replay if hasattr(e, "response")]
    assert len(objects) == 3 and all(r.instructions == instructions for r in objects)


def test_the_sdk_stream_helper_sees_no_injected_text(proxy: Proxy, upstream: FakeUpstream) -> None:
    token = _token_with_curated(proxy)
    upstream.enqueue(Scenario(content="streamed", id="resp_h"))
    with proxy.client(token).responses.stream(
        model=MODEL, input="Hello", instructions="Mine.", **SESSION
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.instructions == "Mine." and final.output_text == "streamed"
    assert all(CURATED not in event.model_dump_json(warnings=False) for event in events)


def test_nothing_placed_means_the_upstreams_bytes(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()  # no curated memory: nothing is injected on a first turn
    upstream.enqueue(Scenario(content="plain", id="resp_plain"))
    body = {"model": MODEL, "input": "Hello", "instructions": "Mine."}
    reply = httpx.post(
        f"{proxy.url}/v1/responses", json=body, headers=auth(token, **{"X-Session-Id": "p"})
    )
    whole = upstream.stored_responses["resp_plain"][0]
    assert json.loads(reply.content) == whole
    assert forwarded(upstream)["instructions"] == "Mine."


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_that_echoes_input_gets_the_clients_input_back(
    proxy: Proxy, upstream: FakeUpstream, stream: bool
) -> None:
    token = _token_with_curated(proxy)
    upstream.enqueue(Scenario(content="first answer"))
    proxy.client(token).responses.create(model=MODEL, input="first question", **SESSION)
    # The second turn of the session: its history is placed in `input` before the request's own.
    upstream.enqueue(Scenario(content="second answer", id="resp_in", echo_input=True))
    body = {"model": MODEL, "input": "second question"}
    if stream:
        _, raw = stream_raw(proxy, token, body)
        objects = [data["response"] for _, data in sse_events(raw) if "response" in data]
    else:
        raw = httpx.post(
            f"{proxy.url}/v1/responses", json=body, headers=auth(token, **{"X-Session-Id": "s"})
        ).content
        objects = [json.loads(raw)]
    assert len(forwarded(upstream)["input"]) == 3  # two history items and the question
    assert b"first question" not in raw and CURATED.encode() not in raw
    assert objects and all(o["input"] == "second question" for o in objects)
    assert all(o["instructions"] is None for o in objects)
