"""Secrets never leak: a session touching every error path, streaming, and the admin API,
with every log record (all loggers, all threads, DEBUG) and every response body scanned."""

from __future__ import annotations

import json
import logging

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import auth, closed_port_url, stream_raw, user
from tests.support.proxy import UPSTREAM_KEY, Proxy

MODEL = "gpt-4o-mini"
# The test's own client library is not the proxy; the SDK logs its request options at DEBUG.
CLIENT_LOGGERS = ("openai",)


def _log_text(records: list[logging.LogRecord]) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    parts = []
    for record in records:
        if record.name.startswith(CLIENT_LOGGERS):
            continue
        parts.append(formatter.format(record))  # message, args and any traceback
        parts.append(repr(record.msg))
        parts.append(repr(record.args))
        parts.append(repr(getattr(record, "__dict__", {})))
    return "\n".join(parts)


def test_no_secret_in_logs_errors_or_admin_responses(
    proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    bodies: list[str] = []  # every response text a client or operator could see

    created = proxy.admin(
        "POST",
        "/tokens",
        json={
            "name": "agent",
            "llm_base_url": proxy.upstream_url,
            "llm_api_key": UPSTREAM_KEY,
        },
    )
    assert created.status_code == 201
    token_id, token = created.json()["id"], created.json()["token"]
    unreachable = proxy.admin(
        "POST",
        "/tokens",
        json={
            "name": "down",
            "llm_base_url": closed_port_url(),
            "llm_api_key": UPSTREAM_KEY,
        },
    )
    down_id, down_token = unreachable.json()["id"], unreachable.json()["token"]
    tokens = [token, down_token]
    # creation shows the new secret once, in `token`, and nothing else secret
    for reply in (created, unreachable):
        bodies.append(json.dumps({k: v for k, v in reply.json().items() if k != "token"}))

    client = proxy.client(token)
    # success, non-stream and stream (with a reasoning part and a usage chunk)
    client.chat.completions.create(model=MODEL, messages=[user("hello")])
    upstream.enqueue(Scenario(content="streamed", reasoning="thinking"))
    list(
        client.chat.completions.create(
            model=MODEL,
            messages=[user("stream")],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    # our 422 and 400
    bad = proxy.chat(token, model=MODEL, messages=[{"role": "robot", "content": "x"}])
    assert bad.status_code == 422
    bodies.append(bad.text)
    not_json = httpx.post(
        f"{proxy.url}/v1/chat/completions", content=b"{oops", headers=auth(token), timeout=30
    )
    assert not_json.status_code == 400
    bodies.append(not_json.text)
    long_session = proxy.chat(token, {"X-Session-Id": "x" * 300}, model=MODEL, messages=[])
    assert long_session.status_code == 422
    bodies.append(long_session.text)
    # upstream 401 (passed through) and upstream unreachable (our 502), both ways
    for stream in (False, True):
        upstream.enqueue(Scenario(status=401))
        with pytest.raises(openai.AuthenticationError) as denied:
            client.chat.completions.create(model=MODEL, messages=[user("x")], stream=stream)
        bodies.append(denied.value.response.text)
        with pytest.raises(openai.InternalServerError) as down:
            proxy.client(down_token).chat.completions.create(
                model=MODEL, messages=[user("x")], stream=stream
            )
        assert down.value.status_code == 502
        bodies.append(down.value.response.text)
        bodies.append(str(down.value))
    # a stream that breaks off mid-way
    upstream.enqueue(Scenario(content="a b c d e f", disconnect_after_chunks=2))
    _, broken = stream_raw(proxy, token, {"model": MODEL, "messages": [user("x")]})
    bodies.append(broken.decode())
    # embeddings and models through the proxy; an unreachable one too
    client.models.list()
    with pytest.raises(openai.InternalServerError) as models_down:
        proxy.client(down_token).models.list()
    bodies.append(models_down.value.response.text)
    # auth failures with a wrong and a rotated-away secret
    rotated = proxy.admin("POST", f"/tokens/{token_id}/rotate")
    assert rotated.status_code == 200
    new_token = rotated.json()["token"]
    tokens.append(new_token)
    bodies.append(json.dumps({k: v for k, v in rotated.json().items() if k != "token"}))
    stale = proxy.chat(token, model=MODEL, messages=[user("x")])
    assert stale.status_code == 401
    bodies.append(stale.text)
    # admin reads and updates
    for method, path, kwargs in (
        ("GET", "/tokens", {}),
        ("GET", f"/tokens/{token_id}", {}),
        ("GET", f"/tokens/{down_id}", {}),
        ("PATCH", f"/tokens/{token_id}", {"json": {"session_window_size": 5}}),
        ("PATCH", f"/tokens/{token_id}", {"json": {"llm_api_key": ""}}),  # 422
        ("GET", "/tokens/999999", {}),  # 404
    ):
        reply = proxy.admin(method, path, **kwargs)
        assert reply.status_code < 500
        bodies.append(reply.text)
    # the service token on the admin API and the admin token on chat
    bodies.append(httpx.get(f"{proxy.url}/v1/admin/tokens", headers=auth(new_token)).text)
    bodies.append(proxy.chat(proxy.admin_token, model=MODEL, messages=[user("x")]).text)

    secrets = [*tokens, UPSTREAM_KEY, proxy.admin_token]
    log_text = _log_text(logs.records)
    assert logs.records, "the scan must see the proxy's log records"
    assert any(r.name.startswith("memory_bridge") for r in logs.records)
    leaky = {r.name for r in logs.records if any(x in _log_text([r]) for x in secrets)}
    assert leaky == set(), f"loggers that logged a secret: {sorted(leaky)}"
    for secret in secrets:
        assert secret not in log_text
        for body in bodies:
            assert secret not in body
        # and no recognisable fragment either (e.g. a secret cut off in a message)
        assert secret[-16:] not in log_text
