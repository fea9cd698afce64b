"""The stream relay through the real proxy: whole events only, a well-formed ending when the
upstream breaks off mid-event (an `openai.APIError` in the SDK), and which ends of a stream
count as a completed turn (stored) and which as a truncated one (relayed, not stored)."""

from __future__ import annotations

import json
import math

import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import (
    assistant,
    injected,
    last_messages,
    sse_data,
    stream_raw,
    user,
)
from tests.support.proxy import Proxy

MODEL = "gpt-4o-mini"
WORDS = ["alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta"]


def delta(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()


def events(eol: bytes, *, finish: bool = True, done: bool = True) -> list[bytes]:
    """A chat completion stream as its events, each with its blank line."""
    out = [delta(w) + eol + eol for w in WORDS]
    if finish:
        out.append(delta("", "stop") + eol + eol)
    if done:
        out.append(b"data: [DONE]" + eol + eol)
    return out


def next_turn_history(proxy: Proxy, upstream: FakeUpstream, token: str) -> list[dict[str, str]]:
    """What the proxy injects in front of a new request: the session's stored turns."""
    assert proxy.chat(token, model=MODEL, messages=[user("next")]).status_code == 200
    return injected(upstream, [user("next")])


# --- a break mid-event ---------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("chunk_size", [1, 7, 10, 64])
def test_a_break_mid_event_is_an_api_error_in_the_sdk(
    proxy: Proxy, upstream: FakeUpstream, eol: bytes, chunk_size: int
) -> None:
    _, token = proxy.create_token()
    stream = events(eol)
    # Break off in the middle of the fourth event ("delta "), after three whole ones.
    middle = sum(map(len, stream[:3])) + len(stream[3]) // 2
    pieces = math.ceil(middle / chunk_size)
    raw = b"".join(stream)
    upstream.enqueue(Scenario(raw_sse=raw, chunk_size=chunk_size, disconnect_after_chunks=pieces))

    seen: list[str] = []
    with pytest.raises(openai.APIError) as info:  # noqa: PT012
        for chunk in proxy.client(token).chat.completions.create(
            model=MODEL, messages=[user("hi")], stream=True
        ):
            seen.append(chunk.choices[0].delta.content or "")
    # The upstream did break off inside the fourth event.
    assert len(b"".join(stream[:3])) < len(upstream.sent_bytes[-1]) < len(b"".join(stream[:4]))
    # The in-band error, not the end of the connection, and never a JSONDecodeError.
    assert not isinstance(info.value, openai.APIConnectionError)
    assert info.value.body is not None and info.value.body["type"] == "upstream_stream_error"
    assert "".join(seen) == "alpha beta gamma "

    # A broken stream is not a turn.
    assert next_turn_history(proxy, upstream, token) == []


@pytest.mark.parametrize("chunk_size", [3, 10])
def test_the_client_gets_whole_events_then_the_error(
    proxy: Proxy, upstream: FakeUpstream, chunk_size: int
) -> None:
    _, token = proxy.create_token()
    stream = events(b"\n")
    middle = sum(map(len, stream[:2])) + 5
    upstream.enqueue(
        Scenario(
            raw_sse=b"".join(stream),
            chunk_size=chunk_size,
            disconnect_after_chunks=math.ceil(middle / chunk_size),
        )
    )
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    whole = b"".join(stream[:2])
    assert len(upstream.sent_bytes[-1]) > len(whole)  # the upstream did start a third event
    assert raw.startswith(whole)
    tail = raw[len(whole) :]
    data = sse_data(tail)
    assert data[-1] == "[DONE]"
    assert json.loads(data[0])["error"]["type"] == "upstream_stream_error"
    assert tail == b"data: " + data[0].encode() + b"\n\ndata: [DONE]\n\n"


def test_a_break_after_done_appends_nothing_and_keeps_the_turn(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    stream = events(b"\n")
    # Every event reaches the proxy, then the connection drops before the body's end.
    upstream.enqueue(Scenario(raw_sse=b"".join(stream), disconnect_after_chunks=1))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == b"".join(stream)
    assert next_turn_history(proxy, upstream, token) == [user("hi"), assistant("".join(WORDS))]


def test_a_break_after_finish_reason_but_before_done_is_not_stored(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    stream = events(b"\n", done=False)
    upstream.enqueue(Scenario(raw_sse=b"".join(stream), disconnect_after_chunks=1))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw.startswith(b"".join(stream))
    assert sse_data(raw)[-1] == "[DONE]"  # ours, after the error: the client saw a failure
    assert next_turn_history(proxy, upstream, token) == []


# --- clean ends: what counts as a completed turn ----------------------------------------------


@pytest.mark.parametrize(
    ("finish", "done", "stored"),
    [(True, True, True), (False, True, True), (True, False, True), (False, False, False)],
    ids=["both", "done-only", "finish-only", "neither"],
)
def test_a_clean_end_is_a_turn_only_with_finish_reason_or_done(
    proxy: Proxy, upstream: FakeUpstream, finish: bool, done: bool, stored: bool
) -> None:
    _, token = proxy.create_token()
    raw_sse = b"".join(events(b"\n", finish=finish, done=done))
    upstream.enqueue(Scenario(raw_sse=raw_sse, chunk_size=9))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == raw_sse  # relayed as it came either way
    history = next_turn_history(proxy, upstream, token)
    assert history == ([user("hi"), assistant("".join(WORDS))] if stored else [])


@pytest.mark.parametrize(
    "trailer",
    [b"data: [DONE]", b'data: {"choices": [{"index": 0, "delta": {"cont', b": bye\n"],
    ids=["done-unterminated", "half-json", "comment"],
)
def test_an_unterminated_last_event_at_a_clean_end_is_relayed_as_it_is(
    proxy: Proxy, upstream: FakeUpstream, trailer: bytes
) -> None:
    _, token = proxy.create_token()
    raw_sse = b"".join(events(b"\n", done=False)) + trailer
    upstream.enqueue(Scenario(raw_sse=raw_sse, chunk_size=11))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == raw_sse
    # finish_reason came before the trailer: a completed turn.
    assert next_turn_history(proxy, upstream, token) == [user("hi"), assistant("".join(WORDS))]


def test_neither_marker_and_a_half_event_at_the_end_is_not_stored(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token()
    raw_sse = b"".join(events(b"\n", finish=False, done=False)) + b'data: {"choices": [{"ind'
    upstream.enqueue(Scenario(raw_sse=raw_sse))
    _, raw = stream_raw(proxy, token, {"model": MODEL, "messages": [user("hi")]})
    assert raw == raw_sse
    assert next_turn_history(proxy, upstream, token) == []
    assert last_messages(upstream) == [user("next")]


# --- passthrough tokens: the same relay, nothing captured --------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 10])
def test_a_passthrough_stream_breaking_mid_event_is_an_api_error(
    proxy: Proxy, upstream: FakeUpstream, chunk_size: int
) -> None:
    _, token = proxy.create_token(memory={"mode": "off"})
    stream = events(b"\n")
    middle = sum(map(len, stream[:3])) + len(stream[3]) // 2
    upstream.enqueue(
        Scenario(
            raw_sse=b"".join(stream),
            chunk_size=chunk_size,
            disconnect_after_chunks=math.ceil(middle / chunk_size),
        )
    )
    seen: list[str] = []
    with pytest.raises(openai.APIError) as info:  # noqa: PT012
        for chunk in proxy.client(token).chat.completions.create(
            model=MODEL, messages=[user("hi")], stream=True
        ):
            seen.append(chunk.choices[0].delta.content or "")
    assert not isinstance(info.value, openai.APIConnectionError)
    assert "".join(seen) == "alpha beta gamma "
