"""Streamed Responses through the real proxy: the upstream's events relayed byte for byte,
the turn captured on the side and stored only when the response completed, and a broken
stream ended by an `error` event that the openai SDK raises as an `APIError`."""

from __future__ import annotations

import json
import math

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import auth, stored_rows
from tests.support.proxy import Proxy
from tests.support.responses_helpers import MODEL, forwarded, msg, sse_events, stream_raw

TEXT = "Streaming works — über alles, 日本語 too."


def stored(proxy: Proxy) -> list[dict[str, object]]:
    return [body for *_, body in stored_rows(proxy)]


@pytest.mark.parametrize("chunk_size", [None, 1, 7, 300])
def test_events_are_relayed_byte_for_byte(
    proxy: Proxy, upstream: FakeUpstream, chunk_size: int | None
) -> None:
    _, token = proxy.create_token()
    call = ToolCall("get_weather", {"city": "Zürich"}, id="call_z")
    upstream.enqueue(
        Scenario(content=TEXT, reasoning="THOUGHTS", tool_calls=[call], chunk_size=chunk_size)
    )
    response, raw = stream_raw(proxy, token, {"model": MODEL, "input": "go"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert raw == upstream.sent_bytes[-1]
    names = [name for name, _ in sse_events(raw)]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in names
    assert forwarded(upstream)["stream"] is True


def test_the_sdk_reads_the_stream_and_the_turn_is_stored(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    client = proxy.client(token)
    upstream.enqueue(Scenario(content=TEXT, reasoning="SECRET-REASONING"))
    events = list(client.responses.create(model=MODEL, input="Stream please", stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == TEXT and len(deltas) > 3
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert stored(proxy) == [
        {"role": "user", "content": "Stream please"},
        {"role": "assistant", "content": TEXT},
    ]
    # ... and the next turn sees it, as history items before its own.
    upstream.enqueue(Scenario(content="next"))
    with client.responses.stream(model=MODEL, input="And now?") as stream:
        assert stream.get_final_response().output_text == "next"
    assert forwarded(upstream)["input"] == [
        msg("user", "Stream please"),
        msg("assistant", TEXT),
        msg("user", "And now?"),
    ]
    assert "SECRET-REASONING" not in json.dumps(stored(proxy))


def test_a_final_event_without_output_is_captured_from_the_deltas(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="from the deltas", bare_completed=True, chunk_size=5))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "input": "hi"})
    assert sse_events(raw)[-1][1]["response"]["output"] == []
    assert stored(proxy)[-1] == {"role": "assistant", "content": "from the deltas"}


@pytest.mark.parametrize("chunk_size", [1, 9, 64])
def test_a_break_mid_event_is_an_api_error_in_the_sdk(
    proxy: Proxy, upstream: FakeUpstream, chunk_size: int
) -> None:
    _, token = proxy.create_token()
    whole = Scenario(content="alpha beta gamma delta epsilon zeta")
    upstream.enqueue(whole)
    _, reference = stream_raw(proxy, token, {"model": MODEL, "input": "measure"}, session="x")
    events = reference.split(b"\n\n")
    # Break off in the middle of the fifth text delta.
    cut = next(i for i, e in enumerate(events) if b"output_text.delta" in e) + 4
    middle = sum(len(e) + 2 for e in events[:cut]) + len(events[cut]) // 2
    pieces = math.ceil(middle / chunk_size)
    upstream.enqueue(
        Scenario(content=whole.content, chunk_size=chunk_size, disconnect_after_chunks=pieces)
    )

    seen: list[str] = []
    client = proxy.client(token)
    with pytest.raises(openai.APIError) as info:  # noqa: PT012
        for event in client.responses.create(model=MODEL, input="hi", stream=True):
            if event.type == "response.output_text.delta":
                seen.append(event.delta)
    # The in-band error, not the end of the connection, and never a JSONDecodeError.
    assert not isinstance(info.value, openai.APIConnectionError)
    assert info.value.body is not None and info.value.body["type"] == "upstream_stream_error"
    assert "".join(seen) == "alpha beta gamma delta "
    # A broken stream is not a turn (the measuring one in session "x" was).
    assert [b["content"] for b in stored(proxy)] == ["measure", whole.content]


def test_the_error_event_is_well_formed_and_nothing_is_made_up(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="one two three four", disconnect_after_chunks=6))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "input": "hi"})
    assert raw.startswith(upstream.sent_bytes[-1])
    events = sse_events(raw)
    assert len(events) == 7  # the six relayed whole, then ours
    name, error = events[-1]
    assert name == "error" and error["type"] == "error"
    assert error["sequence_number"] == events[-2][1]["sequence_number"] + 1
    assert error["code"] == "upstream_stream_error" and error["message"]
    assert not any(n == "response.completed" for n, _ in events)
    assert b"[DONE]" not in raw
    assert stored(proxy) == []


@pytest.mark.parametrize(
    "scenario",
    [Scenario(response_status="failed"), Scenario(content="cut short", omit_done=True)],
    ids=["response.failed", "no-final-event"],
)
def test_a_response_that_did_not_complete_is_relayed_but_not_stored(
    proxy: Proxy, upstream: FakeUpstream, scenario: Scenario
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(scenario)
    _, raw = stream_raw(proxy, token, {"model": MODEL, "input": "hi"})
    assert raw == upstream.sent_bytes[-1]
    assert stored(proxy) == []


def test_an_incomplete_response_is_a_turn_cut_by_a_limit(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="half an answ", response_status="incomplete"))
    events = list(
        proxy.client(token).responses.create(
            model=MODEL, input="hi", max_output_tokens=3, stream=True
        )
    )
    assert events[-1].type == "response.incomplete"
    assert stored(proxy)[-1] == {"role": "assistant", "content": "half an answ"}


def test_a_client_that_leaves_cancels_the_upstream(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    upstream.enqueue(Scenario(content="word " * 200, chunk_delay=0.05))
    with httpx.stream(
        "POST",
        f"{proxy.url}/v1/responses",
        json={"model": MODEL, "input": "hi", "stream": True},
        headers=auth(token),
        timeout=30,
    ) as response:
        for line in response.iter_lines():
            if "output_text.delta" in line:
                break  # and leave
    assert upstream.wait_cancelled()
    assert stored(proxy) == []
