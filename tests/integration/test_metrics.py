"""`/metrics` and the access log: the figures match the requests sent, labels stay bounded and
free of secrets and message text, METRICS_TOKEN opens `/metrics` and nothing else, and with
LOG_FORMAT=json each request is one JSON line with its id, token, route, status and timing.

The registry is the process's: every figure is read as a difference around the requests."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memory_bridge.server.logs import JsonFormatter
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import user
from tests.support.longterm_support import wait_until
from tests.support.proxy import Proxy, start_proxy

SCRAPER = "scrape-token-0123456789abcdef"
MESSAGE = "my locker code is 4417"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def scraped(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Proxy]:
    server, proxy = start_proxy(tmp_path / "data", upstream_server[1], metrics_token=SCRAPER)
    try:
        yield proxy
    finally:
        server.stop()


def samples(proxy: Proxy, bearer: str = SCRAPER) -> tuple[Samples, str]:
    reply = httpx.get(f"{proxy.url}/metrics", headers={"Authorization": f"Bearer {bearer}"})
    assert reply.status_code == 200, reply.text
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }
    return found, reply.text


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_match_the_requests_sent(scraped: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = scraped.create_token()
    before, _ = samples(scraped)
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 4,
        "total_tokens": 124,
        "prompt_tokens_details": {"cached_tokens": 96},
    }
    upstream.enqueue(
        Scenario(content="noted", usage=usage),
        Scenario(content="again", usage=usage),
        Scenario(status=503, error_body={"error": {"message": "busy"}}),
    )
    for _ in range(2):
        reply = scraped.chat(token, {"X-Session-Id": "m"}, model="m", messages=[user(MESSAGE)])
        assert reply.status_code == 200, reply.text
    failed = scraped.chat(token, {"X-Session-Id": "m"}, model="m", messages=[user(MESSAGE)])
    assert failed.status_code == 503
    after, text = samples(scraped)
    tid = str(token_id)
    requests = "memorybridge_requests_total"
    assert delta(before, after, requests, route="chat", status="200", token_id=tid) == 2
    assert delta(before, after, requests, route="chat", status="503", token_id=tid) == 1
    assert delta(before, after, "memorybridge_turns_total", outcome="stored") == 2
    assert delta(before, after, "memorybridge_upstream_errors_total", kind="http_5xx") == 1
    cached = "memorybridge_upstream_cached_prompt_tokens_total"
    assert delta(before, after, cached, token_id=tid) == 2 * 96
    prompt = "memorybridge_upstream_prompt_tokens_total"
    assert delta(before, after, prompt, token_id=tid) == 2 * 120
    stages = "memorybridge_stage_seconds_count"
    for stage in ("forge", "added", "upstream_first_byte", "recall:curated", "recall:history"):
        assert delta(before, after, stages, stage=stage) == 3, stage
    # History counts messages: none, then the first turn (2), then both stored turns (4).
    assert delta(before, after, "memorybridge_injected_items_total", source="history") == 6
    # Labels hold names and numbers only: no message text, no secret.
    for secret in (MESSAGE, token, scraped.admin_token, SCRAPER):
        assert secret not in text
    # The code alone is checked in label values only: a sample's float may hold those digits.
    label_values = {value for (_, labels) in after for (_, value) in labels}
    assert not any("4417" in value for value in label_values)
    routes = {dict(labels).get("route") for (name, labels) in after if name == requests}
    # The bounded names of http/edge.py route_of, never a path a client typed.
    named = {"chat", "responses", "responses_item", "mcp", "admin", "metrics", "console"}
    assert routes <= named | {"health", "passthrough", "other"}
    assert "memorybridge_queue_depth" in text


def test_metrics_token_opens_metrics_only(scraped: Proxy) -> None:
    _, token = scraped.create_token()
    url = scraped.url
    assert httpx.get(f"{url}/metrics").status_code == 401
    service = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}/metrics", headers=service).status_code == 403
    assert httpx.get(f"{url}/metrics", headers=scraped.admin_headers).status_code == 200
    scraper = {"Authorization": f"Bearer {SCRAPER}"}
    assert httpx.get(f"{url}/metrics", headers=scraper).status_code == 200
    assert httpx.get(f"{url}/v1/admin/tokens", headers=scraper).status_code == 401
    reply = httpx.post(
        f"{url}/v1/chat/completions", headers=scraper, json={"model": "m", "messages": []}
    )
    assert reply.status_code == 401


def test_each_request_is_one_json_log_line(
    scraped: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    token_id, token = scraped.create_token()
    with caplog.at_level(logging.INFO, logger="memory_bridge.access"):
        reply = scraped.chat(token, {"X-Session-Id": "j"}, model="m", messages=[user(MESSAGE)])
        rid = reply.headers["x-request-id"]

        def access_lines() -> list[str]:
            return [
                JsonFormatter().format(r)
                for r in caplog.records
                if r.name == "memory_bridge.access" and getattr(r, "request_id", "") == rid
            ]

        # The line is written once the last byte is sent, which can be after the client has
        # read the reply.
        wait_until(access_lines, what="the access line")
    lines = access_lines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert "\n" not in lines[0]
    assert entry["request_id"] == rid
    assert entry["token_id"] == token_id
    assert entry["route"] == "chat"
    assert entry["status"] == 200
    assert entry["duration_ms"] > 0
    assert MESSAGE not in lines[0] and token not in lines[0]


def test_the_grafana_dashboard_asks_for_metrics_that_exist(scraped: Proxy) -> None:
    dashboard = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    asked = {name for e in exprs for name in re.findall(r"memorybridge_\w+", e)}
    _, text = samples(scraped)
    exposed = set(re.findall(r"^# TYPE (memorybridge_\w+) (\w+)", text, re.M))
    names = set()
    for name, kind in exposed:
        names.add(name)
        if kind == "counter":
            names.add(f"{name}_total")
        if kind == "histogram":
            names.update(f"{name}_{part}" for part in ("bucket", "sum", "count"))
    assert asked and asked <= names, asked - names
