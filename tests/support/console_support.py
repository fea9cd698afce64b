"""The console's browser test harness: one server (the real app on loopback, the fake upstream
as LLM, memory LLM and embedder) and one headless Debian Chromium page for the test module,
with helpers that screenshot each page under `.artifacts/console/` and scan it for secrets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import EMBED_KEY, MEMORY_LLM_KEY
from tests.support.loopback import LoopbackServer
from tests.support.proxy import UPSTREAM_KEY, Proxy, start_proxy

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "console"
METRICS_TOKEN = "metrics-scrape-secret-0123456789"
HOSTILE_CHAT = "<img src=x onerror=alert(1)> hello"
USAGE = {
    "prompt_tokens": 80,
    "completion_tokens": 4,
    "total_tokens": 84,
    "prompt_tokens_details": {"cached_tokens": 64},
}
HOSTILE_CURATED = (
    "Motto: ship it.\n</textarea><script>window.__pwned = 1</script><img src=x onerror=alert(2)>"
)

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (scripts/test.sh installs it)"
)


class Console:
    """The shared state of the module: servers, the browser page, what the tests made."""

    def __init__(self, proxy: Proxy, fake: FakeUpstream, page: Any) -> None:
        self.proxy = proxy
        self.fake = fake
        self.page = page
        self.dialogs: list[str] = []
        self.token_id = 0
        self.secret = ""
        self.visited: list[str] = []
        self.baseline: dict[Any, float] = {}

    def url(self, path: str) -> str:
        return f"{self.proxy.url}{path}"

    def secrets(self) -> list[str]:
        found = [self.proxy.admin_token, UPSTREAM_KEY, MEMORY_LLM_KEY, EMBED_KEY, METRICS_TOKEN]
        return [s for s in (*found, self.secret) if s]

    def shot(self, name: str, *, secret_shown: bool = False) -> str:
        """Screenshot the page and check it carries no secret (the one-time secret page may
        show the token's own secret, and nothing else)."""
        html = self.page.content()
        for secret in self.secrets():
            if secret_shown and secret == self.secret:
                continue
            assert secret not in html, f"a secret is on the page {name}"
        assert self.proxy.admin_token not in self.page.url
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        self.visited.append(name)
        return html

    def go(self, path: str) -> None:
        self.page.goto(self.url(path))

    def chat(self, user: str, session: str, *messages: str) -> Any:
        client = self.proxy.client(self.secret)
        body = [{"role": "user", "content": m} for m in messages]
        return client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=body,
            user=user,
            extra_headers={"X-Session-Id": session},
        )


def console_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    sync_playwright = playwright_api.sync_playwright
    fake = FakeUpstream()
    with LoopbackServer(fake.app) as upstream:
        server, proxy = start_proxy(
            tmp_path_factory.mktemp("console") / "data",
            upstream.url,
            job_max_attempts=1,
            job_poll_seconds=0.1,
            metrics_token=METRICS_TOKEN,
        )
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.set_default_timeout(10_000)
                state = Console(proxy, fake, page)
                page.on("dialog", lambda d: (state.dialogs.append(d.message), d.dismiss()))
                state.baseline = metrics_now(state)
                yield state
                browser.close()
        finally:
            server.stop()


def metrics_now(c: Console) -> dict[Any, float]:
    from prometheus_client.parser import text_string_to_metric_families

    reply = httpx.get(c.url("/metrics"), headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }


def assert_inert(c: Console) -> None:
    assert c.dialogs == [], c.dialogs
    assert c.page.evaluate("typeof window.__pwned") == "undefined"
    assert c.page.locator("script").count() == 0
    assert c.page.locator("img").count() == 0


def imported_copy(c: Console) -> int:
    """A second token holding the hostile conversation through an import of the first's
    export."""
    export = c.proxy.admin(
        "GET", f"/tokens/{c.token_id}/export", params={"include": "sessions,curated"}
    )
    assert export.status_code == 200, export.text
    token_id, _ = c.proxy.create_token(name="imported")
    answer = c.proxy.admin("POST", f"/tokens/{token_id}/import", content=export.content)
    assert answer.status_code == 200, answer.text
    assert answer.json()["imported"] > 0
    return token_id


def facts(c: Console, user: str) -> int:
    reply = c.proxy.admin("GET", f"/tokens/{c.token_id}/memories", params={"user": user})
    return len(reply.json()["data"]) if reply.status_code == 200 else 0


def failed_jobs(c: Console) -> int:
    reply = c.proxy.admin("GET", f"/tokens/{c.token_id}/jobs/attention")
    return len(reply.json()["data"])
