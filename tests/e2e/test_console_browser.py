"""The console in a real browser: headless Debian Chromium driven by Playwright, against the
real app on loopback with the fake upstream as LLM, memory LLM and embedder.

One server and one browser for the module (`console_support`); the tests run in file order
and build on each other: the token created by one is the one chatted through, inspected and
erased by the later ones. Every page visited is screenshotted under `.artifacts/console/` and
scanned for secrets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import Scenario, extract_user_facts
from tests.support.console_support import (
    HOSTILE_CHAT,
    HOSTILE_CURATED,
    METRICS_TOKEN,
    USAGE,
    Console,
    assert_inert,
    console_module,
    facts,
    failed_jobs,
    imported_copy,
    metrics_now,
    needs_chromium,
)
from tests.support.longterm_support import memory_fields, wait_until
from tests.support.proxy import UPSTREAM_KEY

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    yield from console_module(tmp_path_factory)


def _sign_in(c: Console, token: str) -> None:
    c.go("/console/login")
    c.page.fill("#admin-token", token)
    c.page.click("button[type=submit]")


def test_a_service_token_cannot_sign_in(console: Console) -> None:
    c = console
    _, service_secret = c.proxy.create_token(name="not-an-admin")
    _sign_in(c, service_secret)
    assert "/console/login" in c.page.url
    assert "not the admin token" in c.page.content()
    assert not [k for k in c.page.context.cookies() if k["name"] == "mb_console"]
    assert service_secret not in c.page.content()
    c.shot("login")


def test_sign_in_sets_a_strict_http_only_cookie(console: Console) -> None:
    c = console
    _sign_in(c, c.proxy.admin_token)
    assert c.page.url.endswith("/console/")
    cookie = next(k for k in c.page.context.cookies() if k["name"] == "mb_console")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["secure"] is False  # plain http on loopback; Secure over https
    assert c.proxy.admin_token not in cookie["value"]
    # Nothing of the sign-in in the browser's storage.
    stored = c.page.evaluate("JSON.stringify([localStorage, sessionStorage])")
    assert c.proxy.admin_token not in stored
    headers = httpx.get(c.url("/console/login")).headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"


def test_create_a_token_shows_its_secret_once(console: Console) -> None:
    c = console
    c.go("/console/tokens/new")
    config = {
        "name": "console-bot",
        "llm_base_url": c.proxy.upstream_url,
        "llm_api_key": UPSTREAM_KEY,
        **memory_fields(c.proxy.upstream_url),
    }
    c.page.fill("#config", json.dumps(config))
    c.page.uncheck("#validate")
    c.page.click("main form button[type=submit]")
    secret = c.page.locator("[data-testid=secret]").inner_text().strip()
    assert secret.startswith("mb-") or len(secret) > 20
    c.secret = secret
    c.token_id = int(re.search(r"Token (\d+) created", c.page.content()).group(1))  # type: ignore[union-attr]
    c.shot("token-created", secret_shown=True)
    c.go(f"/console/tokens/{c.token_id}")
    html = c.shot("token")
    assert secret not in html and UPSTREAM_KEY not in html
    # A bad edit comes back with the API's message and changes nothing.
    c.page.fill("#patch", json.dumps({"session_window_size": -3}))
    c.page.click("form[action$='/edit'] button")
    assert "session_window_size" in c.page.locator("[role=alert]").inner_text()
    c.go("/console/tokens")
    c.shot("tokens")


def test_edit_curated_memory(console: Console) -> None:
    c = console
    c.go(f"/console/tokens/{c.token_id}/curated")
    c.page.fill("#memory-md", HOSTILE_CURATED)
    c.page.click("form:has(#memory-md) button")
    assert "The document was saved." in c.page.content()
    assert c.page.input_value("#memory-md") == HOSTILE_CURATED
    c.shot("curated")
    assert_inert(c)


def test_chats_show_as_a_transcript_whose_turn_opens_its_trace(console: Console) -> None:
    c = console
    for fact in ("My favourite colour is teal.", "I have a dog named Rex."):
        assert c.chat("alice", "first", fact).http_response.status_code == 200
    wait_until(lambda: facts(c, "alice") >= 2, what="both facts extracted")
    # In another session: one fact is asked about, the other is already in the request.
    c.fake.enqueue(Scenario(content="Teal; and Rex.", usage=USAGE))
    client = c.proxy.client(c.secret)
    reply = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "user", "content": "I have a dog named Rex."},
            {"role": "assistant", "content": "Nice."},
            {"role": "user", "content": "What is my favourite colour and my dog?"},
        ],
        user="alice",
        extra_headers={"X-Session-Id": "second"},
    )
    request_id = reply.headers["x-request-id"]
    c.go(f"/console/conversations?token={c.token_id}")
    c.page.click("text=alice")
    c.shot("conversations")
    c.page.click("text=second")
    c.shot("session")
    c.page.click(f"text=Open the trace of request {request_id}")
    c.shot("trace")
    injected = c.page.locator("table.trace").nth(0)
    dropped = c.page.locator("table.trace").nth(1)
    assert "My favourite colour is teal." in injected.inner_text()
    assert "I have a dog named Rex." in dropped.inner_text()
    assert "dropped: in_prompt" in dropped.inner_text()
    assert "served 64 prompt tokens from its cache" in c.page.locator("main").inner_text()


def test_the_playground_recalls_a_fact_said_in_another_session(console: Console) -> None:
    c = console
    upstream_calls = len(c.fake.proxied_requests)
    c.go(f"/console/playground?token={c.token_id}")
    c.page.fill("#user", "alice")
    c.page.fill("#question", "Which colour do I like?")
    c.page.click('main button:has-text("Recall")')
    kept = c.page.locator("table.trace").nth(0).inner_text()
    assert "My favourite colour is teal." in kept
    assert "longterm" in kept
    c.shot("playground")
    assert len(c.fake.proxied_requests) == upstream_calls  # no LLM was asked


def test_edit_and_delete_a_fact(console: Console) -> None:
    c = console
    c.go(f"/console/memories?token={c.token_id}&user=alice")
    c.shot("memories")
    # Lineage: a fact opens the turn it was extracted from.
    c.page.locator("tr", has_text="My favourite colour is teal.").get_by_text(
        "the turn it came from"
    ).click()
    assert "Session “first” of alice" in c.page.locator("h1").inner_text()
    assert "My favourite colour is teal." in c.page.locator("article").first.inner_text()
    c.go(f"/console/memories?token={c.token_id}&user=alice")
    row = c.page.locator("tr", has_text="I have a dog named Rex.")
    row.locator("input[name=text]").fill("I have a cat named Tom.")
    row.locator("button", has_text="Save").click()
    assert "The fact was saved." in c.page.content()
    assert c.page.locator("td.text", has_text="I have a cat named Tom.").count() == 1
    assert c.page.locator("td.text", has_text="Rex").count() == 0
    c.page.locator("tr", has_text="I have a cat named Tom.").locator(
        "button", has_text="Delete"
    ).click()
    assert "The fact was deleted." in c.page.content()
    assert c.page.locator("td.text", has_text="Tom").count() == 0
    assert c.page.locator("td.text", has_text="teal").count() == 1


def test_hostile_content_renders_inert_everywhere(console: Console) -> None:
    c = console
    hostile = c.chat("mallory", "evil", HOSTILE_CHAT)
    assert hostile.http_response.status_code == 200
    wait_until(lambda: facts(c, "mallory") >= 1, what="the hostile fact extracted")
    # Another session: the first turn comes back as a recalled candidate in this one's trace.
    script_turn = "hello </textarea><script>window.__pwned = 1</script>"
    second = c.chat("mallory", "evil2", script_turn)
    assert second.http_response.status_code == 200
    wait_until(lambda: facts(c, "mallory") >= 2, what="hostile facts extracted")
    for path, name in (
        (
            f"/console/conversations/session?token={c.token_id}&user=mallory&name=evil",
            "xss-session",
        ),
        (f"/console/memories?token={c.token_id}&user=mallory", "xss-memories"),
        (f"/console/evolving?token={c.token_id}&user=mallory", "evolving"),
        (f"/console/tokens/{c.token_id}/curated?user=mallory", "xss-curated"),
        (f"/console/conversations?token={c.token_id}", None),
        (f"/console/traces/{c.token_id}/{second.headers['x-request-id']}", "xss-trace"),
        (
            f"/console/conversations/session?token={imported_copy(c)}&user=mallory&name=evil",
            "xss-import",
        ),
    ):
        c.go(path)
        if name:
            c.shot(name)
        assert_inert(c)
        if "session" in path or "traces" in path:  # shown, as text
            assert "<img src=x onerror=alert(1)> hello" in c.page.locator("main").inner_text()
    c.go(f"/console/conversations/session?token={c.token_id}&user=mallory&name=evil")
    assert "<img src=x onerror=alert(1)> hello" in c.page.locator("main").inner_text()
    c.go(f"/console/playground?token={c.token_id}")
    c.page.fill("#user", "mallory")
    c.page.fill("#question", "img onerror textarea script")
    c.page.click('main button:has-text("Recall")')
    assert_inert(c)


def test_retry_a_failed_job(console: Console) -> None:
    c = console
    c.fake.memory_responder = lambda texts: Scenario(status=500, error_body={"error": "down"})
    assert c.chat("bob", "jobs", "I play the cello.").http_response.status_code == 200
    c.go(f"/console/jobs?token={c.token_id}")
    wait_until(lambda: failed_jobs(c) > 0, what="a failed job")
    c.fake.memory_responder = extract_user_facts
    c.go(f"/console/jobs?token={c.token_id}")
    c.shot("jobs")
    c.page.locator("button", has_text="Retry").first.click()
    assert "The job is queued again." in c.page.content()
    wait_until(lambda: facts(c, "bob") >= 1, what="the retried job's fact")
    assert failed_jobs(c) == 0


def test_export_and_import_through_the_browser(console: Console, tmp_path: Path) -> None:
    c = console
    c.go(f"/console/tokens/{c.token_id}/transfer")
    c.shot("transfer")
    with c.page.expect_download() as download:
        c.page.click("main button:has-text('Download the export')")
    saved = tmp_path / "export.ndjson"
    download.value.save_as(saved)
    header = json.loads(saved.read_text().splitlines()[0])
    assert header["format"] == "memory-bridge.export" and header["events"] > 0
    target, _ = c.proxy.create_token(name="import-target")
    c.go(f"/console/tokens/{target}/transfer")
    c.page.set_input_files("#file", str(saved))
    c.page.click("main button:has-text('Import')")
    assert f"{header['events']} event(s) imported" in c.page.locator("main").inner_text()
    c.shot("imported")
    c.go(f"/console/conversations?token={target}")
    assert c.page.locator("td a", has_text="alice").count() == 1


def test_erase_an_end_user_shows_the_receipt(console: Console) -> None:
    c = console
    c.go(f"/console/users?token={c.token_id}")
    c.page.fill("#user", "alice")
    c.page.click("main button.danger")
    assert "Erase “alice” of token" in c.page.content()
    c.shot("users-confirm")
    c.page.click("main button.danger")
    receipt = c.page.locator("main").inner_text()
    assert "Erasure receipt" in receipt
    assert re.search(r"longterm\s+[1-9]", receipt) or re.search(r"messages\s+[1-9]", receipt)
    c.shot("users-erased")
    c.go(f"/console/memories?token={c.token_id}&user=alice")
    assert "No facts." in c.page.content()
    c.go(f"/console/audit?token={c.token_id}&type=user_erased")
    assert "user_erased" in c.page.locator("table").inner_text()
    c.shot("audit")


def test_overview_and_narrow_screen(console: Console) -> None:
    c = console
    c.go("/console/")
    assert c.page.locator("svg").count() >= 6
    c.shot("overview")
    c.page.set_viewport_size({"width": 400, "height": 900})
    c.go(f"/console/conversations/session?token={c.token_id}&user=mallory&name=evil")
    c.shot("session-400px")
    width = c.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 420
    c.page.set_viewport_size({"width": 1280, "height": 900})


def test_metrics_count_the_requests_sent(console: Console) -> None:
    c = console
    for bearer, status in ((c.secret, 403), (METRICS_TOKEN, 200), (c.proxy.admin_token, 200)):
        assert (
            httpx.get(c.url("/metrics"), headers={"Authorization": f"Bearer {bearer}"}).status_code
            == status
        )
    text = httpx.get(c.url("/metrics"), headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    now = metrics_now(c)
    # The registry is the process's: figures are read as differences from the module's start.
    samples = {k: v - c.baseline.get(k, 0.0) for k, v in now.items()}
    chats = samples[
        (
            "memorybridge_requests_total",
            (("route", "chat"), ("status", "200"), ("token_id", str(c.token_id))),
        )
    ]
    assert chats == 6  # alice: 2 + 1 in her second session; mallory: 2; bob: 1
    stored = samples[("memorybridge_turns_total", (("outcome", "stored"),))]
    assert stored == chats
    cached = ("memorybridge_upstream_cached_prompt_tokens_total", (("token_id", str(c.token_id)),))
    assert samples[cached] == 64
    # The curated block goes into every prompt of the token; recall found the facts' turns.
    assert samples[("memorybridge_injected_items_total", (("source", "curated"),))] == chats
    assert samples[("memorybridge_injected_items_total", (("source", "episodic"),))] >= 1
    assert (
        samples[
            ("memorybridge_job_outcomes_total", (("consumer", "longterm"), ("outcome", "failed")))
        ]
        == 1
    )
    for secret in c.secrets():
        assert secret not in text
    assert "teal" not in text


def test_csrf_and_sign_out(console: Console) -> None:
    c = console
    cookie = next(k for k in c.page.context.cookies() if k["name"] == "mb_console")
    jar = {"mb_console": cookie["value"]}
    before = len(c.proxy.admin("GET", "/tokens").json()["data"])
    refused = httpx.post(
        c.url("/console/tokens/new"),
        cookies=jar,
        data={"config": json.dumps({"name": "x", "llm_base_url": c.proxy.upstream_url})},
    )
    assert refused.status_code == 403
    forged = httpx.post(
        c.url("/console/tokens/new"),
        cookies=jar,
        data={
            "csrf": "forged",
            "config": json.dumps({"name": "x", "llm_base_url": c.proxy.upstream_url}),
        },
    )
    assert forged.status_code == 403
    assert len(c.proxy.admin("GET", "/tokens").json()["data"]) == before
    assert httpx.get(c.url("/console/tokens"), cookies=jar).status_code == 200
    # The console's cookie opens nothing of the admin API, which stays bearer-only.
    assert httpx.get(c.url("/v1/admin/tokens"), cookies=jar).status_code == 401
    c.go("/console/")
    c.page.click("text=Sign out")
    assert "/console/login" in c.page.url
    stale = httpx.get(c.url("/console/tokens"), cookies=jar)
    assert stale.status_code == 303 and stale.headers["location"] == "/console/login"
    assert c.dialogs == []
