"""What is stored is bounded: long texts are cut with a visible marker (never dropped), inline
images and files become placeholders, and injected history fits a token budget, so one huge
message is never re-sent forever. A client that resends the huge original is still matched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import Msg, assistant, injected, stored_rows, user
from tests.support.proxy import Proxy, start_proxy

MODEL = "m"
MAX_BYTES = 2048
BUDGET = 300  # tokens of injected history


@pytest.fixture
def small(tmp_path: Path, upstream_server: tuple[FakeUpstream, str]) -> Iterator[Proxy]:
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        max_stored_message_bytes=MAX_BYTES,
        history_token_budget=BUDGET,
    )
    try:
        yield proxy
    finally:
        server.stop()


def _turn(
    proxy: Proxy, upstream: FakeUpstream, token: str, messages: list[Msg], reply: str
) -> None:
    upstream.enqueue(Scenario(content=reply))
    response = proxy.chat(token, model=MODEL, messages=messages)
    assert response.status_code == 200, response.text


def test_a_long_message_is_stored_cut_with_a_marker_and_forwarded_whole(
    small: Proxy, upstream: FakeUpstream
) -> None:
    token = small.create_token()[1]
    long_text = "é" * 5000  # 10,000 bytes of UTF-8
    upstream.enqueue(Scenario(content="noted"))
    response = small.chat(token, model=MODEL, messages=[user(long_text)])
    assert response.status_code == 200, response.text
    token_id = small.admin("GET", "/tokens").json()["data"][0]["id"]
    trace = small.admin("GET", f"/tokens/{token_id}/traces/{response.headers['x-request-id']}")
    assert trace.json()["stored_shortened"] == 1  # the trace says the turn is stored cut
    assert upstream.chat_requests[-1].json["messages"][-1]["content"] == long_text
    rows = stored_rows(small)
    assert [r[3] for r in rows] == ["user", "assistant"]
    stored = rows[0][4]["content"]
    head, _, marker = stored.partition("\n[truncated by MemoryBridge: ")
    assert long_text.startswith(head) and len(head.encode()) <= MAX_BYTES
    assert len(head.encode()) > MAX_BYTES - 4  # cut at a character boundary, not shorter
    assert marker.startswith(f"{len(head.encode())} of 10000 bytes kept")


def test_a_client_resending_the_long_original_is_not_stored_or_injected_twice(
    small: Proxy, upstream: FakeUpstream
) -> None:
    token = small.create_token()[1]
    long_text = "word " * 2000
    _turn(small, upstream, token, [user(long_text)], "noted")
    conversation = [user(long_text), assistant("noted"), user("and now?")]
    _turn(small, upstream, token, conversation, "fine")
    assert injected(upstream, conversation) == []
    assert [r[3] for r in stored_rows(small)] == ["user", "assistant", "user", "assistant"]


def test_inline_images_and_files_are_stored_as_placeholders(
    small: Proxy, upstream: FakeUpstream
) -> None:
    token = small.create_token()[1]
    data_url = "data:image/png;base64," + "A" * 50_000
    parts = [
        {"type": "text", "text": "what is in these?"},
        {"type": "image_url", "image_url": {"url": data_url}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": "B" * 40_000}},
    ]
    _turn(small, upstream, token, [{"role": "user", "content": parts}], "a cat and a report")
    assert upstream.chat_requests[-1].json["messages"][-1]["content"] == parts
    stored = stored_rows(small)[0][4]["content"]
    assert stored[0] == parts[0]
    assert stored[1]["type"] == "text" and stored[1]["text"].startswith("[image of about")
    assert stored[2] == parts[2]  # a short URL is a reference, kept
    assert stored[3]["type"] == "text" and "'report.pdf'" in stored[3]["text"]
    assert "AAAA" not in str(stored) and "BBBB" not in str(stored)


def test_injected_history_fits_the_token_budget_newest_first(
    small: Proxy, upstream: FakeUpstream
) -> None:
    token = small.create_token()[1]
    # Each message is ~100 tokens: the budget of 300 holds the newest three.
    for i in range(4):
        _turn(
            small,
            upstream,
            token,
            [user(f"question {i} " + "alpha " * 100)],
            f"answer {i} " + "beta " * 100,
        )
    _turn(small, upstream, token, [user("last")], "ok")
    history = injected(upstream, [user("last")])
    assert 0 < len(history) < 8
    assert history[-1]["content"].startswith("answer 3")
    assert sum(len(m["content"].split()) for m in history) <= BUDGET


def test_a_budget_cut_never_leaves_a_tool_result_without_its_call(
    small: Proxy, upstream: FakeUpstream
) -> None:
    token = small.create_token()[1]
    # The call's arguments are long: a cut by tokens falls between the call and its result.
    arguments = json.dumps({"q": "delta " * 100})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    conversation = [
        user("use the tool " + "gamma " * 250),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "result " * 150},
    ]
    _turn(small, upstream, token, conversation, "done " * 100)
    _turn(small, upstream, token, [user("next")], "ok")
    history = injected(upstream, [user("next")])
    assert [m["role"] for m in history] == ["assistant"]  # the orphaned result went too
    assert history[0]["content"].startswith("done")
