"""Curated memory (MEMORY.md / USER.md), the token's `memory` field, and secrecy of the
Gateway `userKey`, through the real proxy's admin API and chat endpoint (issue 4)."""

from __future__ import annotations

import functools
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from memory_bridge.sources.gateway_client import GATEWAY_RULE
from tests.fakes.gateway import ADD, FLUSH, SEARCH, FakeGateway
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.hybrid_memory_support import (
    CURATED_HEADER,
    GW_USER,
    MODEL,
    USER_KEY,
    Msg,
    Served,
    closed_port_url,
    dump,
    events,
    gateway_memory,
    system,
    system_text,
    user,
    wait_calls,
    wait_events,
    wait_until,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy

LIMIT = 65536  # the documented default of settings.curated_max_bytes


def ask(
    proxy: Proxy,
    token: str,
    messages: list[Any],
    *,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> str:
    client = proxy.client(token)
    extra = headers or {}
    if stream:
        chunks: Any = client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, extra_headers=extra, **kwargs
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    completion = client.chat.completions.create(
        model=MODEL, messages=messages, extra_headers=extra, **kwargs
    )
    return completion.choices[0].message.content or ""


def rendered(record: logging.LogRecord) -> str:
    """A log record as a handler would write it, traceback included."""
    return logging.Formatter("%(name)s %(message)s").format(record)


def head(upstream: FakeUpstream, index: int = -1) -> str:
    """The system prompt of a request the upstream received."""
    return system_text(upstream.chat_requests[index].json["messages"])


def put(proxy: Proxy, token_id: int, kind: str, body: str | bytes, **params: str) -> int:
    reply = proxy.admin("PUT", f"/tokens/{token_id}/curated/{kind}", content=body, params=params)
    return reply.status_code


def get(proxy: Proxy, token_id: int, kind: str, **params: str) -> str:
    reply = proxy.admin("GET", f"/tokens/{token_id}/curated/{kind}", params=params)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/markdown")
    return reply.text


# -- the curated admin API ------------------------------------------------------------------


def test_curated_documents_round_trip_as_plain_markdown(served: Served) -> None:
    proxy = served.proxy
    token_id, _ = proxy.create_token()
    other_id, _ = proxy.create_token(name="other")
    assert get(proxy, token_id, "memory") == "" and get(proxy, token_id, "user") == ""

    memory = "# Project\n- Codename **BLUEBIRD** ✓\n"
    assert put(proxy, token_id, "memory", memory) == 204
    assert put(proxy, token_id, "user", "Token-wide: prefers metric units.") == 204
    assert put(proxy, token_id, "user", "Alice: a pianist.", user="alice") == 204
    assert get(proxy, token_id, "memory") == memory  # byte for byte, whitespace included
    assert get(proxy, token_id, "user") == "Token-wide: prefers metric units."
    assert get(proxy, token_id, "user", user="alice") == "Alice: a pianist."
    assert get(proxy, token_id, "user", user="bob") == ""  # the admin API shows what is stored

    assert put(proxy, token_id, "memory", "replaced") == 204  # PUT replaces
    assert get(proxy, token_id, "memory") == "replaced"
    assert put(proxy, token_id, "user", "", user="alice") == 204  # an empty document is allowed
    assert get(proxy, token_id, "user", user="alice") == ""
    # every token has its own documents
    assert get(proxy, other_id, "memory") == "" and get(proxy, other_id, "user") == ""
    # MEMORY.md is token-wide; `user` only selects a USER.md
    assert put(proxy, token_id, "memory", "x", user="alice") == 422
    assert proxy.admin("GET", f"/tokens/{token_id}/curated/memory?user=alice").status_code == 422
    assert proxy.admin("GET", f"/tokens/{token_id}/curated/soul").status_code == 422
    assert get(proxy, token_id, "memory") == "replaced"


def test_curated_admin_routes_need_the_admin_token(served: Served) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token()
    path = f"{proxy.url}/v1/admin/tokens/{token_id}/curated/memory"
    for headers, status in (({}, 401), ({"Authorization": f"Bearer {token}"}, 403)):
        assert httpx.get(path, headers=headers).status_code == status
        assert httpx.put(path, headers=headers, content="evil").status_code == status
    assert get(proxy, token_id, "memory") == ""


@pytest.mark.parametrize("kind", ["memory", "user"])
def test_a_document_beyond_the_limit_is_413_and_changes_nothing(served: Served, kind: str) -> None:
    proxy = served.proxy
    assert proxy.settings.curated_max_bytes == LIMIT
    token_id, _ = proxy.create_token()
    exact = "é" * (LIMIT // 2)  # the limit counts UTF-8 bytes, not characters
    assert len(exact.encode()) == LIMIT
    assert put(proxy, token_id, kind, exact) == 204
    assert get(proxy, token_id, kind) == exact

    reply = proxy.admin("PUT", f"/tokens/{token_id}/curated/{kind}", content=exact + "!")
    assert reply.status_code == 413
    assert str(LIMIT) in reply.json()["error"]["message"]
    assert get(proxy, token_id, kind) == exact
    assert put(proxy, token_id, kind, "x" * (LIMIT * 4)) == 413
    assert get(proxy, token_id, kind) == exact


def test_the_configured_limit_is_the_one_enforced(
    tmp_path: Any, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    served = Served(tmp_path / "data", upstream_server[1], curated_max_bytes=10)
    try:
        proxy = served.proxy
        token_id, _ = proxy.create_token()
        assert put(proxy, token_id, "memory", "0123456789") == 204
        assert put(proxy, token_id, "memory", "0123456789A") == 413
        assert put(proxy, token_id, "user", "12345678901", user="alice") == 413
        assert get(proxy, token_id, "memory") == "0123456789"
    finally:
        served.drain()


def test_unknown_tokens_are_404_on_every_curated_and_event_route(served: Served) -> None:
    proxy = served.proxy
    for method, path in [
        ("GET", "/tokens/999/curated/memory"),
        ("PUT", "/tokens/999/curated/memory"),
        ("GET", "/tokens/999/curated/user"),
        ("PUT", "/tokens/999/curated/user"),
        ("GET", "/tokens/999/curated/user?user=alice"),
        ("PUT", "/tokens/999/curated/user?user=alice"),
        ("GET", "/tokens/999/events"),
        ("GET", "/tokens/1/curated/memory"),  # id 1 is the admin token, not a service token
    ]:
        reply = proxy.admin(method, path, content="text" if method == "PUT" else None)
        assert reply.status_code == 404, (method, path, reply.text)
        assert reply.json()["error"]["type"] == "not_found_error"
    # a deleted token's documents are gone with it
    token_id, _ = proxy.create_token()
    assert put(proxy, token_id, "memory", "soon gone") == 204
    assert proxy.admin("DELETE", f"/tokens/{token_id}?purge=true").status_code == 204
    assert proxy.admin("GET", f"/tokens/{token_id}/curated/memory").status_code == 404


# -- the snapshot in the system prompt ------------------------------------------------------

MODES = ["curated", "hybrid", "hybrid-gateway-down", "hybrid-unreachable", "implicit-degraded"]


def memory_for(mode: str, gw_url: str) -> Msg | None:
    return {
        "curated": {"mode": "curated"},
        "hybrid": gateway_memory(gw_url),
        "hybrid-gateway-down": gateway_memory(gw_url),
        "hybrid-unreachable": gateway_memory(closed_port_url()),
        "implicit-degraded": None,
    }[mode]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("mode", MODES)
def test_the_curated_snapshot_is_in_the_system_prompt_in_every_mode(
    served: Served,
    gateway: FakeGateway,
    gw_url: str,
    upstream: FakeUpstream,
    mode: str,
    stream: bool,
) -> None:
    proxy = served.proxy
    memory = memory_for(mode, gw_url)
    token_id, token = proxy.create_token(**({} if memory is None else {"memory": memory}))
    assert put(proxy, token_id, "memory", "Codename BLUEBIRD.") == 204
    assert put(proxy, token_id, "user", "The user is called Ada.") == 204
    if mode == "hybrid-gateway-down":
        gateway.fail("search", "500")

    for n in range(2):  # on every request, not just the first
        upstream.enqueue(Scenario(content="ok"))
        request = [system("You are terse."), user(f"question {n}")]
        assert ask(proxy, token, request, stream=stream, headers={"X-Session-Id": "s"}) == "ok"
        prompt = head(upstream)
        assert prompt.startswith("You are terse.\n\n" + CURATED_HEADER)
        assert "### MEMORY.md\nCodename BLUEBIRD." in prompt
        assert "### USER.md (about the user)\nThe user is called Ada." in prompt
        assert prompt.count(CURATED_HEADER) == 1
        if mode.startswith("hybrid"):
            # one stable rule, after the curated block
            assert prompt.count(GATEWAY_RULE) == 1
            assert prompt.index(GATEWAY_RULE) > prompt.index("Codename BLUEBIRD.")
        else:
            assert GATEWAY_RULE not in prompt
    if mode == "hybrid-gateway-down":
        assert len(events(proxy, token_id, type="memory_gateway_recall_failed")) == 2


def test_an_end_users_user_md_is_used_for_that_user_only(
    served: Served, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory={"mode": "curated"})
    assert put(proxy, token_id, "memory", "Shared MEMORY.") == 204
    assert put(proxy, token_id, "user", "TOKEN-WIDE USER.") == 204
    assert put(proxy, token_id, "user", "ALICE USER.", user="alice") == 204
    assert put(proxy, token_id, "user", "BOB USER.", user="bob") == 204

    cases: list[tuple[dict[str, Any], str]] = [
        ({"user": "alice"}, "ALICE USER."),  # body `user`
        ({"extra_headers": {"X-User-Id": "bob"}}, "BOB USER."),  # header
        ({"user": "alice", "extra_headers": {"X-User-Id": "bob"}}, "ALICE USER."),  # body wins
        ({"user": "carol"}, "TOKEN-WIDE USER."),  # no USER.md of her own
        ({}, "TOKEN-WIDE USER."),
    ]
    for kwargs, expected in cases:
        proxy.client(token).chat.completions.create(model=MODEL, messages=[user("hi")], **kwargs)
        prompt = head(upstream)
        assert "Shared MEMORY." in prompt, kwargs
        assert expected in prompt, kwargs
        others = {"TOKEN-WIDE USER.", "ALICE USER.", "BOB USER."} - {expected}
        assert not any(o in prompt for o in others), kwargs


def test_an_empty_curated_snapshot_adds_nothing(served: Served, upstream: FakeUpstream) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory={"mode": "curated"})
    assert put(proxy, token_id, "memory", "   \n") == 204
    ask(proxy, token, [user("hi")])
    assert upstream.chat_requests[-1].json["messages"] == [user("hi")]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_edit_during_a_request_affects_only_the_next_request(
    served: Served, upstream: FakeUpstream, stream: bool
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token(memory={"mode": "curated"})
    assert put(proxy, token_id, "memory", "OLD MEMORY") == 204
    assert put(proxy, token_id, "user", "OLD USER") == 204

    upstream.enqueue(Scenario(content="slow reply", delay=1.0), Scenario(content="next reply"))
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(ask, proxy, token, [user("first")], stream=stream)
        wait_until(lambda: upstream.chat_requests, "the upstream to receive the request")
        assert put(proxy, token_id, "memory", "NEW MEMORY") == 204
        assert put(proxy, token_id, "user", "NEW USER") == 204
        assert not in_flight.done()  # the edit really happened while the request was open
        assert in_flight.result() == "slow reply"

    first = head(upstream, 0)
    assert "OLD MEMORY" in first and "OLD USER" in first
    assert "NEW" not in first
    assert ask(proxy, token, [user("second")], stream=stream) == "next reply"
    second = head(upstream, 1)
    assert "NEW MEMORY" in second and "NEW USER" in second and "OLD" not in second


def test_the_snapshot_is_taken_at_the_start_even_while_recall_is_pending(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    """The curated snapshot is frozen when the request starts, not when recall ends: an edit
    made while the Gateway search is still hanging is not seen by that request."""
    proxy = served.proxy
    token_id, token = proxy.create_token(memory=gateway_memory(gw_url))
    assert put(proxy, token_id, "memory", "OLD MEMORY") == 204
    gateway.fail("search", "timeout")  # hangs until release() (or the 10 s token timeout)
    gateway.set_results([{"text": "recalled fact"}])

    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(ask, proxy, token, [user("first")])
        wait_until(lambda: gateway.payloads(SEARCH), "the Gateway search to start")
        assert put(proxy, token_id, "memory", "NEW MEMORY") == 204
        assert not in_flight.done()
        assert upstream.chat_requests == []
        gateway.release()
        in_flight.result()

    sent = upstream.chat_requests[0].json["messages"]
    assert "OLD MEMORY" in system_text(sent) and "NEW MEMORY" not in dump(sent)
    assert "recalled fact" in sent[1]["content"]  # the released search did answer in time
    gateway.fail("search", None)
    ask(proxy, token, [user("second")])
    assert "NEW MEMORY" in head(upstream)
    wait_events(proxy, token_id, 2, type="memory_gateway_flush_succeeded")
    assert gateway.violations == []


# -- the `memory` field of a token ----------------------------------------------------------


def bad_memory(gw_url: str) -> list[Any]:
    creds = {"baseUrl": gw_url, "userId": GW_USER, "userKey": USER_KEY}

    def gw(**changes: Any) -> Msg:
        block = {**creds, **changes}
        return {"mode": "hybrid", "gateway": {k: v for k, v in block.items() if v is not ...}}

    return [
        ("hybrid", "memory"),
        ({"mode": "smart"}, "memory.mode"),
        ({"mode": "hybrid"}, "memory.gateway"),
        ({"mode": "hybrid", "gateway": "x"}, "memory.gateway"),
        (gw(userKey=...), "memory.gateway.userKey"),
        (gw(userKey=""), "memory.gateway.userKey"),
        (gw(userKey="   "), "memory.gateway.userKey"),
        (gw(userId=...), "memory.gateway.userId"),
        (gw(userId=""), "memory.gateway.userId"),
        (gw(baseUrl=...), "memory.gateway.baseUrl"),
        (gw(baseUrl="ftp://gateway"), "memory.gateway.baseUrl"),
        (gw(baseUrl="not a url"), "memory.gateway.baseUrl"),
        (
            {"mode": "hybrid", "gateway": {"base_url": gw_url, "user_id": GW_USER}},
            "memory.gateway.userKey",  # a missing key is named in the documented spelling
        ),
        (
            {"mode": "hybrid", "gateway": {"base_url": gw_url, "user_id": "", "user_key": "k"}},
            "memory.gateway.user_id",
        ),
        (gw(scope=[]), "memory.gateway.scope"),
        (gw(scope="current_chat"), "memory.gateway.scope"),
        (gw(scope=["everything"]), "memory.gateway.scope"),
        (gw(scope=["resources", "resources"]), "memory.gateway.scope"),
        (gw(topK=0), "memory.gateway.topK"),
        (gw(topK=101), "memory.gateway.topK"),
        (gw(topK="8"), "memory.gateway.topK"),
        (gw(top_k=1.5), "memory.gateway.top_k"),
        (gw(timeoutSeconds=0), "memory.gateway.timeoutSeconds"),
        (gw(timeoutSeconds=-1), "memory.gateway.timeoutSeconds"),
        (gw(timeout_seconds="10"), "memory.gateway.timeout_seconds"),
        (gw(appId=""), "memory.gateway.appId"),
        (gw(project_id=""), "memory.gateway.project_id"),
        (gw(surprise=1), "memory.gateway.surprise"),
        (gw(user_key=USER_KEY), "memory.gateway.user_key"),  # given twice
        ({"mode": "hybrid", "gateway": creds, "extra": True}, "memory.extra"),
        # implicit hybrid may lack credentials, but what it gives is still validated
        ({"gateway": {"baseUrl": gw_url, "topK": 0}}, "memory.gateway.topK"),
        ({"gateway": {"userKey": USER_KEY, "scope": ["nope"]}}, "memory.gateway.scope"),
    ]


def test_an_invalid_memory_field_is_422_naming_the_field_and_never_quoting_the_key(
    served: Served, gw_url: str
) -> None:
    proxy = served.proxy
    good_id, _ = proxy.create_token(name="good", memory=gateway_memory(gw_url))
    before = proxy.admin("GET", f"/tokens/{good_id}").json()
    for memory, field in bad_memory(gw_url):
        body = {"name": "t", "llm_base_url": proxy.upstream_url, "memory": memory}
        for reply in (
            proxy.admin("POST", "/tokens", json=body),
            proxy.admin("PATCH", f"/tokens/{good_id}", json={"memory": memory}),
        ):
            assert reply.status_code == 422, (memory, reply.text)
            message = reply.json()["error"]["message"]
            assert re.match(re.escape(field) + r"(\[\d+\])?: ", message), (field, message)
            assert USER_KEY not in reply.text
    assert [t["id"] for t in proxy.admin("GET", "/tokens").json()["data"]] == [good_id]
    assert proxy.admin("GET", f"/tokens/{good_id}").json() == before


@pytest.mark.parametrize(
    "gateway_block",
    [
        {
            "baseUrl": "{url}",
            "userId": GW_USER,
            "userKey": USER_KEY,
            "appId": "app-1",
            "projectId": "proj-1",
            "scope": ["resources"],
            "topK": 2,
            "timeoutSeconds": 5,
        },
        {
            "base_url": "{url}/",
            "user_id": GW_USER,
            "user_key": USER_KEY,
            "app_id": "app-1",
            "project_id": "proj-1",
            "scope": ["resources"],
            "top_k": 2,
            "timeout_seconds": 5.0,
        },
        {
            "baseUrl": "{url}",
            "user_id": GW_USER,
            "userKey": USER_KEY,
            "app_id": "app-1",
            "projectId": "proj-1",
            "scope": ["resources"],
            "top_k": 2,
            "timeoutSeconds": 5,
        },
    ],
    ids=["camelCase", "snake_case", "mixed"],
)
def test_camel_and_snake_case_configure_the_same_gateway(
    served: Served,
    gateway: FakeGateway,
    gw_url: str,
    upstream: FakeUpstream,
    gateway_block: Msg,
) -> None:
    proxy = served.proxy
    block = {
        k: v.replace("{url}", gw_url) if k in ("baseUrl", "base_url") else v
        for k, v in gateway_block.items()
    }
    token_id, token = proxy.create_token(memory={"mode": "hybrid", "gateway": block})
    assert proxy.admin("GET", f"/tokens/{token_id}").json()["memory_layers"]["gateway"] == "active"
    ask(proxy, token, [user("hello")], headers={"X-Session-Id": "s9"})
    assert gateway.payloads(SEARCH) == [
        {
            "user_id": GW_USER,
            "user_key": USER_KEY,
            "conversation_id": "s9",
            "query": "hello",
            "scope": ["resources"],
            "top_k": 2,
            "app_id": "app-1",
            "project_id": "proj-1",
        }
    ]
    wait_calls(gateway, [SEARCH, ADD, FLUSH])
    assert gateway.violations == []


def test_defaults_and_ignored_gateway_block_in_curated_mode(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    # curated mode ignores even an invalid gateway block
    reply = proxy.admin(
        "POST",
        "/tokens",
        json={
            "name": "c",
            "llm_base_url": proxy.upstream_url,
            "memory": {"mode": "curated", "gateway": {"topK": 0, "userKey": USER_KEY}},
        },
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["memory_layers"]["gateway"].startswith("off")
    assert USER_KEY not in reply.text

    _, token = proxy.create_token(memory=gateway_memory(gw_url))
    ask(proxy, token, [user("defaults please")])
    [search] = gateway.payloads(SEARCH)
    assert (search["app_id"], search["project_id"], search["top_k"]) == ("default", "default", 8)
    assert search["scope"] == ["current_chat", "resources"]
    wait_calls(gateway, [SEARCH, ADD, FLUSH])
    assert gateway.violations == []


def test_patching_in_credentials_turns_a_degraded_token_active(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    token_id, token = proxy.create_token()
    ask(proxy, token, [user("before")])
    assert gateway.calls == []
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"memory": gateway_memory(gw_url)})
    assert reply.status_code == 200 and reply.json()["memory_layers"]["gateway"] == "active"
    assert USER_KEY not in reply.text
    ask(proxy, token, [user("after")])
    assert [p["query"] for p in gateway.payloads(SEARCH)] == ["after"]
    wait_calls(gateway, [SEARCH, ADD, FLUSH])
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"memory": {"mode": "curated"}})
    assert reply.json()["memory_layers"]["gateway"].startswith("off")
    ask(proxy, token, [user("curated again")])
    served.drain()
    assert [c.path for c in gateway.calls] == [SEARCH, ADD, FLUSH]
    assert gateway.violations == []


# -- the userKey stays secret everywhere ----------------------------------------------------


def test_the_user_key_never_appears_in_responses_events_errors_or_logs(
    served: Served, gateway: FakeGateway, gw_url: str, upstream: FakeUpstream, logs: Any
) -> None:
    proxy = served.proxy
    shown: list[str] = []

    created = proxy.admin(
        "POST",
        "/tokens",
        json={
            "name": "secretive",
            "llm_base_url": proxy.upstream_url,
            "llm_api_key": UPSTREAM_KEY,
            "memory": gateway_memory(gw_url, timeoutSeconds=0.3),
        },
    )
    assert created.status_code == 201
    token_id, token = created.json()["id"], created.json()["token"]
    masked = created.json()["config"]["memory"]["gateway"]["userKey"]
    assert masked and masked != USER_KEY  # masked, not dropped
    shown.append(created.text)
    snake_id, snake_token = proxy.create_token(
        name="snake",
        memory={
            "mode": "hybrid",
            "gateway": {"base_url": gw_url, "user_id": GW_USER, "user_key": USER_KEY},
        },
    )
    shown.append(proxy.admin("GET", f"/tokens/{token_id}").text)
    shown.append(proxy.admin("GET", f"/tokens/{snake_id}").text)
    shown.append(proxy.admin("GET", "/tokens").text)
    shown.append(proxy.admin("PATCH", f"/tokens/{token_id}", json={"name": "renamed"}).text)
    # errors: a config error next to a valid key, a chat request the upstream cannot answer
    shown.append(
        proxy.admin(
            "PATCH", f"/tokens/{token_id}", json={"memory": gateway_memory(gw_url, topK=0)}
        ).text
    )
    broken_id, broken = proxy.create_token(
        name="broken", llm_base_url=closed_port_url(), memory=gateway_memory(gw_url)
    )
    with pytest.raises(openai.APIStatusError) as failure:
        ask(proxy, broken, [user("anyone?")])
    assert failure.value.status_code == 502
    shown.append(failure.value.response.text)

    # every Gateway outcome, each of which logs or audits something
    def turn_over(session: str) -> bool:
        done = ("memory_gateway_add_failed", "memory_gateway_flush_succeeded")
        return any(e["type"] in done for e in events(proxy, token_id, session=session))

    for mode in ("401", "500", "timeout", "invalid_json", "wrong_shape"):
        gateway.fail("search", mode)
        gateway.fail("add", mode if mode in ("401", "500", "timeout") else None)
        turn = [user(f"search fails: {mode}")]
        ask(proxy, token, turn, stream=True, headers={"X-Session-Id": mode})
        # this turn's background work is over before the fake is re-scripted
        wait_until(functools.partial(turn_over, mode), f"the {mode} turn to be audited")
    gateway.fail("search", None)
    gateway.fail("add", None)
    gateway.fail("flush", "500")
    ask(proxy, snake_token, [user("flush fails")])
    wait_events(proxy, snake_id, 1, type="memory_gateway_flush_failed")
    for some_id in (token_id, snake_id, broken_id):
        shown.append(proxy.admin("GET", f"/tokens/{some_id}/events").text)
    served.drain()  # every background log line is written

    for text in shown:
        assert USER_KEY not in text
    # The database driver's own DEBUG lines are covered by the next test.
    for record in logs.records:
        if record.name != "aiosqlite":
            line = rendered(record)
            for secret in (USER_KEY, UPSTREAM_KEY, token, snake_token, broken):
                assert secret not in line, line
    # the Gateway did receive it: the key travels only where it belongs
    assert any(c.json and c.json.get("user_key") == USER_KEY for c in gateway.calls)
    assert json.loads(shown[0])["config"]["memory"]["gateway"]["userId"] == GW_USER


def test_debug_logs_of_the_database_driver_do_not_carry_the_user_key(
    served: Served, gw_url: str, logs: Any
) -> None:
    """With LOG_LEVEL=DEBUG every log line still keeps the userKey (and the upstream key) out.

    aiosqlite logs each statement with its parameters at DEBUG, and the token row holds the
    token's config, userKey included.
    """
    proxy = served.proxy
    token_id, _ = proxy.create_token(memory=gateway_memory(gw_url))
    proxy.admin("PATCH", f"/tokens/{token_id}", json={"name": "renamed"})
    served.drain()
    leaking = sorted({r.name for r in logs.records if USER_KEY in rendered(r)})
    assert leaking == []
    assert UPSTREAM_KEY not in logs.text
