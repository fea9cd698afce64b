"""The Memory Gateway layer through the real proxy (issue 4), driven with the `openai` SDK.

A strict fake Gateway (tests/fakes/gateway.py) on its own loopback server records every call
and rejects any payload that strays from the spec; each test also checks `.violations`.
Background add→flush is awaited by polling the fake's calls or the audit events; "nothing was
sent" is checked after `Served.drain()`, which stops the proxy once its background work is done.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from memory_bridge.sources.gateway_client import GATEWAY_RULE
from tests.fakes.gateway import ADD, FLUSH, SEARCH, FakeGateway
from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.hybrid_memory_support import (
    CURATED_HEADER,
    EVENT_TYPES,
    GW_USER,
    MODEL,
    RECALL_LABEL,
    USER_KEY,
    Msg,
    Served,
    assistant,
    closed_port_url,
    db_rows,
    dump,
    events,
    gateway_memory,
    stored_event_types,
    system,
    system_text,
    user,
    wait_calls,
    wait_events,
)
from tests.support.proxy import Proxy

RECALLED = "User prefers green tea over coffee"


def ask(
    proxy: Proxy,
    token: str,
    messages: list[Any],
    *,
    stream: bool,
    session: str | None = None,
    **kwargs: Any,
) -> str:
    """One chat completion through the SDK; the assistant text the client saw."""
    client = proxy.client(token)
    headers = {"X-Session-Id": session} if session is not None else {}
    if stream:
        chunks: Any = client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, extra_headers=headers, **kwargs
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    completion = client.chat.completions.create(
        model=MODEL, messages=messages, extra_headers=headers, **kwargs
    )
    return completion.choices[0].message.content or ""


def forwarded(upstream: FakeUpstream, index: int = -1) -> list[Msg]:
    messages: list[Msg] = upstream.chat_requests[index].json["messages"]
    return messages


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- recall: the search payload ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_search_payload_is_exactly_the_spec(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, stream: bool
) -> None:
    proxy = served.proxy
    memory = gateway_memory(
        gw_url,
        appId="app-7",
        projectId="proj-9",
        scope=["current_chat", "all_user_memory"],
        singleEndUser=True,
        topK=3,
        timeoutSeconds=5,
    )
    _, token = proxy.create_token(memory=memory)
    # The query is the latest *user* text, even though the last message is a tool result.
    messages = [
        system("You are terse."),
        user("first question"),
        assistant("first answer"),
        user("What tea do I like?"),
        assistant(
            None,
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
            ],
        ),
        {"role": "tool", "tool_call_id": "call_1", "content": "TOOL-RESULT-TEXT"},
    ]
    upstream.enqueue(Scenario(content="Green tea."))
    assert ask(proxy, token, messages, stream=stream, session="sess-42") == "Green tea."

    assert gateway.payloads(SEARCH) == [
        {
            "user_id": GW_USER,
            "user_key": USER_KEY,
            "conversation_id": "sess-42",
            "query": "What tea do I like?",
            "scope": ["current_chat", "all_user_memory"],
            "top_k": 3,
            "app_id": "app-7",
            "project_id": "proj-9",
        }
    ]
    wait_calls(gateway, [SEARCH, ADD, FLUSH])
    [add] = gateway.payloads(ADD)
    assert [m["content"] for m in add["messages"]] == ["What tea do I like?", "Green tea."]
    assert (add["app_id"], add["project_id"], add["session_id"]) == (
        "app-7",
        "proj-9",
        "chat:sess-42",
    )
    assert "TOOL-RESULT-TEXT" not in dump(gateway.payloads(ADD) + gateway.payloads(FLUSH))
    assert gateway.violations == []


def test_session_defaults_to_default_for_search_add_and_flush(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    ask(proxy, token, [user("hello there")], stream=False)
    wait_calls(gateway, [SEARCH, ADD, FLUSH])
    [search], [add], [flush] = (gateway.payloads(p) for p in (SEARCH, ADD, FLUSH))
    assert search["conversation_id"] == "default"
    assert add["session_id"] == flush["session_id"] == "chat:default"
    assert {e["session"] for e in events(proxy, token_id)} == {"default"}
    assert gateway.violations == []


# -- persistence: add → flush ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_finished_turn_is_added_then_flushed_with_exact_payloads(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, stream: bool
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    gateway.set_results([{"text": RECALLED, "score": 0.9}, {"text": "Lives in Lyon"}])
    upstream.enqueue(Scenario(content="You like green tea.", reasoning="HIDDEN-REASONING"))
    before = now_ms()
    reply = ask(
        proxy,
        token,
        [system("SYSTEM-PROMPT-TEXT"), user("What tea do I like?")],
        stream=stream,
        session="s-add",
    )
    assert reply == "You like green tea."

    wait_calls(gateway, [SEARCH, ADD, FLUSH])
    after = now_ms()
    [add] = gateway.payloads(ADD)
    stamps = [m.get("timestamp") for m in add["messages"]]
    assert add == {
        "user_id": GW_USER,
        "user_key": USER_KEY,
        "session_id": "chat:s-add",
        "app_id": "default",
        "project_id": "default",
        "messages": [
            {
                "sender_id": GW_USER,
                "role": "user",
                "timestamp": stamps[0],
                "content": "What tea do I like?",
            },
            {
                "sender_id": "memory-bridge",
                "role": "assistant",
                "timestamp": stamps[1],
                "content": "You like green tea.",
            },
        ],
    }
    assert all(type(t) is int for t in stamps)
    assert 0 < before <= stamps[0] <= stamps[1] <= after  # UTC epoch ms, non-decreasing
    assert gateway.payloads(FLUSH) == [
        {
            "user_id": GW_USER,
            "user_key": USER_KEY,
            "session_id": "chat:s-add",
            "app_id": "default",
            "project_id": "default",
        }
    ]
    # Never persisted: system prompt, reasoning, recalled Gateway text.
    sent = dump(gateway.payloads(ADD) + gateway.payloads(FLUSH))
    for text in ("SYSTEM-PROMPT-TEXT", "HIDDEN-REASONING", RECALLED, "Lives in Lyon"):
        assert text not in sent

    found = wait_events(proxy, token_id, 3, session="s-add")
    assert [(e["type"], e["data"]) for e in found] == [
        (
            "memory_gateway_recall_succeeded",
            {"scopes": ["current_chat", "resources"], "result_count": 2},
        ),
        ("memory_gateway_add_succeeded", {"gateway_session": "chat:s-add", "message_count": 2}),
        ("memory_gateway_flush_succeeded", {"gateway_session": "chat:s-add"}),
    ]
    assert len({e["request_id"] for e in found}) == 1 and found[0]["request_id"]
    assert {e["session"] for e in found} == {"s-add"}
    assert gateway.violations == []


@pytest.mark.parametrize(
    ("mode", "category", "status"),
    [("401", "unauthorized", 401), ("500", "http_error", 500), ("timeout", "timeout", None)],
)
def test_a_failed_add_is_audited_and_never_flushed_or_retried(
    served: Served,
    gateway: FakeGateway,
    gw_url: str,
    upstream: FakeUpstream,
    mode: Any,
    category: str,
    status: int | None,
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url, timeoutSeconds=0.3))
    gateway.fail("add", mode)
    upstream.enqueue(Scenario(content="Noted."))
    assert ask(proxy, token, [user("remember my tea")], stream=True, session="s1") == "Noted."

    [failed] = wait_events(proxy, token_id, 1, type="memory_gateway_add_failed")
    expected: Msg = {"operation": "add", "category": category}
    if status is not None:
        expected["status"] = status
    assert failed["data"] == expected
    served.drain()
    assert [c.path for c in gateway.calls] == [SEARCH, ADD]  # no flush, no retry
    assert stored_event_types(proxy) == [
        "memory_gateway_recall_succeeded",
        "memory_gateway_add_failed",
    ]
    assert gateway.violations == []


@pytest.mark.parametrize("mode", ["500", "timeout"])
def test_a_failed_flush_keeps_the_add_outcome(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, mode: Any
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url, timeoutSeconds=0.3))
    gateway.fail("flush", mode)
    upstream.enqueue(Scenario(content="Sure."))
    assert ask(proxy, token, [user("hi")], stream=False, session="s1") == "Sure."

    wait_events(proxy, token_id, 1, type="memory_gateway_flush_failed")
    found = events(proxy, token_id)
    assert [e["type"] for e in found] == [
        "memory_gateway_recall_succeeded",
        "memory_gateway_add_succeeded",
        "memory_gateway_flush_failed",
    ]
    assert found[1]["data"] == {"gateway_session": "chat:s1", "message_count": 2}
    expected: Msg = {
        "operation": "flush",
        "category": "http_error" if mode == "500" else "timeout",
        "add_succeeded": True,
    }
    if mode == "500":
        expected["status"] = 500
    assert found[2]["data"] == expected
    served.drain()
    assert [c.path for c in gateway.calls] == [SEARCH, ADD, FLUSH]  # nothing retried
    assert gateway.violations == []


# -- recall failures --------------------------------------------------------------------------

RECALL_FAILURES = [
    ("401", "unauthorized", 401),
    ("500", "http_error", 500),
    ("timeout", "timeout", None),
    ("invalid_json", "invalid_json", 200),
    ("wrong_shape", "invalid_shape", 200),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("mode", "category", "status"), RECALL_FAILURES)
def test_a_failed_recall_leaves_the_request_and_the_reply_unchanged(
    served: Served,
    gateway: FakeGateway,
    gw_url: str,
    upstream: FakeUpstream,
    stream: bool,
    mode: Any,
    category: str,
    status: int | None,
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url, timeoutSeconds=0.3))
    request = [system("Be brief."), user("What tea do I like?")]

    # Baseline: a healthy Gateway with nothing to recall, in another session.
    upstream.enqueue(Scenario(content="Reply one."))
    assert ask(proxy, token, request, stream=stream, session="healthy") == "Reply one."
    baseline = forwarded(upstream)

    gateway.set_results([{"text": RECALLED, "score": 0.9}])  # `wrong_shape` wraps these
    gateway.fail("search", mode)
    upstream.enqueue(Scenario(content="Reply two ✓"))
    assert ask(proxy, token, request, stream=stream, session="broken") == "Reply two ✓"
    sent = forwarded(upstream)
    assert sent == baseline  # no reference message; the rule stays (the Gateway is configured)
    assert GATEWAY_RULE in system_text(sent)
    assert RECALL_LABEL not in dump(sent) and RECALLED not in dump(sent)

    [failed] = events(proxy, token_id, session="broken", type="memory_gateway_recall_failed")
    expected: Msg = {"operation": "search", "category": category}
    if status is not None:
        expected["status"] = status
    assert failed["data"] == expected
    assert gateway.violations == []


def test_an_unreachable_gateway_is_a_connection_failure_and_nothing_else(
    served: Served, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(closed_port_url()))
    upstream.enqueue(Scenario(content="Still here."))
    assert ask(proxy, token, [user("hello")], stream=True) == "Still here."
    assert [m["role"] for m in forwarded(upstream)] == ["system", "user"]
    wait_events(proxy, token_id, 1, type="memory_gateway_add_failed")
    served.drain()
    rows = db_rows(proxy, "select type, data from events order by id")
    assert rows == [
        ("memory_gateway_recall_failed", '{"operation":"search","category":"connection"}'),
        ("memory_gateway_add_failed", '{"operation":"add","category":"connection"}'),
    ]


# -- the reference message ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_recall_is_one_reference_message_after_history_before_the_latest_user_message(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, stream: bool
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    put = proxy.admin("PUT", f"/tokens/{token_id}/curated/memory", content="Codename BLUEBIRD.")
    assert put.status_code == 204

    upstream.enqueue(Scenario(content="first answer"))
    ask(proxy, token, [user("first question")], stream=stream, session="s")

    gateway.set_results(
        [
            {
                "id": "m1",
                "session_id": "chat:older",
                "text": "User prefers  green\ntea over coffee",
                "score": 0.91,
                "source_scope": "current_chat",
                "resource_uri": "mem://1",
                "raw": {"note": "RAW-FIELD-CONTENT"},
                "extra": "EXTRA-FIELD-CONTENT",
            },
            {"text": "Lives in Lyon"},
            {"id": "no-text"},
            "not an object",
        ]
    )
    upstream.enqueue(Scenario(content="second answer"))
    request = [system("You are terse."), user("second question")]
    ask(proxy, token, request, stream=stream, session="s")

    sent = forwarded(upstream)
    head = system_text(sent)
    assert sent[0]["role"] == "system" and head.startswith("You are terse.")
    assert CURATED_HEADER in head and "Codename BLUEBIRD." in head and GATEWAY_RULE in head
    assert "green" not in head and "Lyon" not in head  # recalled text never in the system prompt

    # the stored history, then the dynamic block just before the latest user message
    assert sent[1:3] == [user("first question"), assistant("first answer")]
    reference = sent[3]
    assert reference["role"] == "user" and reference["content"].startswith(RECALL_LABEL)
    assert RECALLED in reference["content"]  # whitespace collapsed onto one line
    assert "Lives in Lyon" in reference["content"]
    for dropped in ("RAW-FIELD-CONTENT", "EXTRA-FIELD-CONTENT", "no-text", "not an object"):
        assert dropped not in dump(sent)
    assert sent[4:] == [user("second question")]
    assert sum(RECALL_LABEL in dump(m) for m in sent) == 1

    [recalled] = events(proxy, token_id, type="memory_gateway_recall_succeeded")[1:]
    assert recalled["data"] == {"scopes": ["current_chat", "resources"], "result_count": 2}

    # The reference message was ephemeral: not in the next request's history, not stored,
    # never sent back to the Gateway.
    gateway.set_results([])
    upstream.enqueue(Scenario(content="third answer"))
    ask(proxy, token, [user("third question")], stream=stream, session="s")
    assert forwarded(upstream)[1:] == [
        user("first question"),
        assistant("first answer"),
        user("second question"),
        assistant("second answer"),
        user("third question"),
    ]
    wait_events(proxy, token_id, 3, type="memory_gateway_flush_succeeded")
    served.drain()
    stored = dump(db_rows(proxy, "select body from messages"))
    assert "green" not in stored and "Lyon" not in stored and "Memory Gateway" not in stored
    to_gateway = dump(gateway.payloads(ADD) + gateway.payloads(FLUSH))
    assert "green" not in to_gateway and "Lyon" not in to_gateway and "BLUEBIRD" not in to_gateway
    assert gateway.violations == []


def test_without_a_client_system_message_the_proxy_adds_one_before_the_reference(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    _, token = proxy.create_token(memory=gateway_memory(gw_url))
    gateway.set_results([{"text": RECALLED}])
    ask(proxy, token, [user("What tea?")], stream=False)
    sent = forwarded(upstream)
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert system_text(sent) == GATEWAY_RULE
    assert RECALLED in sent[1]["content"] and sent[2] == user("What tea?")


# -- when the Gateway is not active ---------------------------------------------------------


INACTIVE = ["curated", "curated+block", "implicit", "implicit-partial", "implicit-blank-key"]


def inactive_memory(kind: str, gw_url: str) -> Msg | None:
    return {
        "curated": {"mode": "curated"},
        "curated+block": gateway_memory(gw_url, mode="curated"),
        "implicit": None,
        "implicit-partial": {"gateway": {"baseUrl": gw_url, "userId": GW_USER}},
        "implicit-blank-key": gateway_memory(gw_url, mode=None, userKey=""),
    }[kind]


@pytest.mark.parametrize("kind", INACTIVE)
def test_an_inactive_gateway_means_no_rule_no_reference_and_zero_calls(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, kind: str
) -> None:
    proxy = served.proxy
    memory = inactive_memory(kind, gw_url)
    config = {} if memory is None else {"memory": memory}
    token_id, token = proxy.create_token(**config)
    detail = proxy.admin("GET", f"/tokens/{token_id}").json()
    layer = detail["memory_layers"]["gateway"]
    # No Gateway at all is off (a fresh token); a block without its credentials, degraded.
    off = kind.startswith("curated") or kind == "implicit"
    assert layer.startswith("off") if off else layer.startswith("degraded")

    gateway.set_results([{"text": RECALLED}])
    for stream in (False, True):
        request = [user(f"hello {stream}")]
        upstream.enqueue(Scenario(content="plain"))
        assert ask(proxy, token, request, stream=stream, session=f"s{stream}") == "plain"
        # nothing at all is injected: no rule, no reference, no curated block (none written)
        assert forwarded(upstream) == request
    served.drain()
    assert gateway.calls == []
    assert stored_event_types(proxy) == []


def test_token_detail_shows_the_gateway_layer_state(
    served: Served, gateway: FakeGateway, gw_url: str
) -> None:
    proxy = served.proxy
    states = {}
    for name, memory in [
        ("active", gateway_memory(gw_url)),
        ("implicit-active", gateway_memory(gw_url, mode=None)),
        ("off", {"mode": "curated"}),
        ("fresh", None),
        ("degraded", {"gateway": {"baseUrl": gw_url, "userId": GW_USER}}),
    ]:
        config: Msg = {"name": name}
        if memory is not None:
            config["memory"] = memory
        token_id, _ = proxy.create_token(**config)
        states[name] = proxy.admin("GET", f"/tokens/{token_id}").json()["memory_layers"]
    assert states["active"]["gateway"] == "active"
    assert states["implicit-active"]["gateway"] == "active"
    assert states["off"]["gateway"].startswith("off")
    assert states["fresh"]["gateway"] == "off (no gateway configured)"
    assert states["degraded"]["gateway"].startswith("degraded")
    # curated memory is on in every mode
    assert all(s["curated"].startswith("on") for s in states.values())
    listed = proxy.admin("GET", "/tokens").json()["data"]
    assert [t["memory_layers"]["gateway"] for t in listed] == [
        s["gateway"] for s in states.values()
    ]
    assert gateway.calls == []


def test_implicit_hybrid_without_credentials_says_so_once_at_info_without_secrets(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, logs: Any
) -> None:
    proxy = served.proxy
    degraded_id, degraded = proxy.create_token(
        name="degraded", memory={"gateway": {"baseUrl": gw_url, "userId": GW_USER}}
    )
    active_id, active = proxy.create_token(name="active", memory=gateway_memory(gw_url))
    curated_id, curated = proxy.create_token(name="curated", memory={"mode": "curated"})
    for token in (degraded, active, curated):
        for n in range(3):
            ask(proxy, token, [user(f"turn {n}")], stream=bool(n % 2), session=f"s{n}")
    wait_events(proxy, active_id, 3, type="memory_gateway_flush_succeeded")
    served.drain()

    # A state, not a degradation: INFO, once, and no warning about it.
    assert not [r for r in logs.records if r.levelname == "WARNING" and "ateway" in r.getMessage()]
    warnings = [r for r in logs.records if "no Memory Gateway configured" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    [warning] = warnings
    assert warning.levelname == "INFO"
    text = warning.getMessage()
    assert str(degraded_id) in text and "gateway" in text.lower()
    for secret in (degraded, active, curated, USER_KEY, proxy.admin_token):
        assert secret not in text
    assert all(str(curated_id) not in r.getMessage() for r in warnings)


def test_a_degraded_token_loaded_by_a_new_process_says_so_once_on_first_use(
    served: Served, gateway: FakeGateway, upstream: FakeUpstream, logs: Any
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(name="degraded")
    served.restart()
    logs.clear()
    for n in range(3):
        ask(served.proxy, token, [user(f"turn {n}")], stream=bool(n % 2))
    served.drain()
    warnings = [
        r.getMessage()
        for r in logs.records
        if r.levelname == "INFO" and "no Memory Gateway configured" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert str(token_id) in warnings[0] and token not in warnings[0]
    assert gateway.calls == []


# -- what is never persisted ----------------------------------------------------------------


def _tool_only(proxy: Proxy, token: str, upstream: FakeUpstream, stream: bool) -> None:
    upstream.enqueue(Scenario(tool_calls=[ToolCall("get_weather", {"city": "Paris"})]))
    client = proxy.client(token)
    kwargs: Any = {"model": MODEL, "messages": [user("Weather in Paris?")]}
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
    else:
        completion = client.chat.completions.create(**kwargs)
        assert completion.choices[0].message.tool_calls
        assert completion.choices[0].message.content is None


def _broken_stream(proxy: Proxy, token: str, upstream: FakeUpstream, stream: bool) -> None:
    upstream.enqueue(Scenario(content="this reply never finishes", disconnect_after_chunks=3))
    chunks = proxy.client(token).chat.completions.create(
        model=MODEL, messages=[user("Tell me a story")], stream=True
    )
    with pytest.raises(openai.APIError):
        for _ in chunks:
            pass


def _upstream_error(proxy: Proxy, token: str, upstream: FakeUpstream, stream: bool) -> None:
    upstream.enqueue(Scenario(status=500))
    with pytest.raises(openai.InternalServerError):
        ask(proxy, token, [user("Anyone there?")], stream=stream)


@pytest.mark.parametrize(
    ("case", "stream"),
    [
        (_tool_only, False),
        (_tool_only, True),
        (_broken_stream, True),
        (_upstream_error, False),
        (_upstream_error, True),
    ],
    ids=["tool-calls-only-json", "tool-calls-only-sse", "broken-stream", "error-json", "error-sse"],
)
def test_unfinished_turns_are_never_sent_to_the_gateway(
    served: Served,
    gateway: FakeGateway,
    gw_url: str,
    upstream: FakeUpstream,
    case: Any,
    stream: bool,
) -> None:
    proxy = served.proxy
    _, token = proxy.create_token(memory=gateway_memory(gw_url))
    case(proxy, token, upstream, stream)
    served.drain()
    assert [c.path for c in gateway.calls] == [SEARCH]  # recall yes, add/flush no
    assert stored_event_types(proxy) == ["memory_gateway_recall_succeeded"]
    assert gateway.violations == []


# -- audit events ---------------------------------------------------------------------------


def test_events_are_filtered_by_session_type_and_position(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    other_id, other = proxy.create_token(name="other", memory=gateway_memory(gw_url))
    ask(proxy, token, [user("in a")], stream=False, session="a")
    wait_events(proxy, token_id, 1, type="memory_gateway_flush_succeeded")
    ask(proxy, token, [user("in b")], stream=True, session="b")
    wait_events(proxy, token_id, 2, type="memory_gateway_flush_succeeded")

    every = events(proxy, token_id)
    assert len(every) == 6
    assert [e["session"] for e in events(proxy, token_id, session="a")] == ["a"] * 3
    adds = events(proxy, token_id, type="memory_gateway_add_succeeded")
    assert [e["session"] for e in adds] == ["a", "b"]
    assert events(proxy, token_id, session="b", type="memory_gateway_recall_succeeded")[0][
        "data"
    ] == {"scopes": ["current_chat", "resources"], "result_count": 0}
    assert events(proxy, token_id, after=every[2]["id"]) == every[3:]
    assert events(proxy, token_id, limit=2) == every[:2]
    assert events(proxy, other_id) == []  # another token's log is its own
    assert proxy.admin("GET", "/tokens/999/events").status_code == 404
    assert proxy.admin("GET", f"/tokens/{token_id}/events?limit=0").status_code == 422
    assert other  # the other token exists but never chatted
    assert gateway.violations == []


def test_every_audit_event_carries_only_its_facts(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    """All six event types, with no credential and no response body in any of them."""
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url, timeoutSeconds=0.3))
    gateway.set_results([{"text": RECALLED, "raw": "RAW"}])
    ask(proxy, token, [user("one")], stream=False, session="ok")
    wait_events(proxy, token_id, 1, type="memory_gateway_flush_succeeded")

    gateway.fail("search", "500")
    gateway.fail("add", "500")
    ask(proxy, token, [user("two")], stream=True, session="add-fails")
    wait_events(proxy, token_id, 1, type="memory_gateway_add_failed")

    gateway.fail("search", None)
    gateway.fail("add", None)
    gateway.fail("flush", "401")
    ask(proxy, token, [user("three")], stream=False, session="flush-fails")
    wait_events(proxy, token_id, 1, type="memory_gateway_flush_failed")

    found = events(proxy, token_id)
    assert {e["type"] for e in found} == set(EVENT_TYPES)
    by_type = {(e["session"], e["type"]): e["data"] for e in found}
    assert by_type[("add-fails", "memory_gateway_recall_failed")] == {
        "operation": "search",
        "category": "http_error",
        "status": 500,
    }
    assert by_type[("add-fails", "memory_gateway_add_failed")] == {
        "operation": "add",
        "category": "http_error",
        "status": 500,
    }
    assert by_type[("flush-fails", "memory_gateway_flush_failed")] == {
        "operation": "flush",
        "category": "unauthorized",
        "status": 401,
        "add_succeeded": True,
    }
    text = dump(found)
    for leak in (USER_KEY, token, "user_key", "stack trace", RECALLED, "RAW", '"status": "ok"'):
        assert leak not in text
    assert all(e["user"] == "" for e in found)
    assert gateway.violations == []


def test_curated_edits_never_reach_the_gateway(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    base = f"/tokens/{token_id}/curated"
    assert proxy.admin("PUT", f"{base}/memory", content="CURATED-MEMORY-MARK").status_code == 204
    assert proxy.admin("PUT", f"{base}/user", content="CURATED-USER-MARK").status_code == 204
    assert (
        proxy.admin("PUT", f"{base}/user?user=alice", content="CURATED-ALICE-MARK").status_code
        == 204
    )
    assert gateway.calls == []  # an edit is not Gateway traffic

    gateway.set_results([{"text": "GATEWAY-RECALL-MARK"}])
    ask(proxy, token, [user("hi")], stream=False, session="s1")
    ask(proxy, token, [user("hi again")], stream=True, session="s2", user="alice")
    head = system_text(forwarded(upstream))
    assert "CURATED-MEMORY-MARK" in head and "CURATED-ALICE-MARK" in head
    wait_events(proxy, token_id, 2, type="memory_gateway_flush_succeeded")
    # Gateway traffic never changed the curated documents either.
    assert proxy.admin("GET", f"{base}/memory").text == "CURATED-MEMORY-MARK"
    assert proxy.admin("GET", f"{base}/user?user=alice").text == "CURATED-ALICE-MARK"
    served.drain()
    assert sorted(c.path for c in gateway.calls) == sorted([SEARCH, SEARCH, ADD, ADD, FLUSH, FLUSH])
    sent = dump([c.json for c in gateway.calls])
    for mark in ("CURATED-MEMORY-MARK", "CURATED-USER-MARK", "CURATED-ALICE-MARK", "Curated"):
        assert mark not in sent
    assert gateway.violations == []
