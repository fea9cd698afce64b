"""A long-term memory config that cannot work is refused when it is saved (422 with the field
and the reason; `?validate=false` saves it anyway), and when one is in use after all, each
chat's 502 names the cause's category, as the server log does next to the request id."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from memory_bridge.embedding.local import local_extra_installed
from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import closed_port_url
from tests.support.jobs_support import wait_drained
from tests.support.longterm_support import (
    EMBED_KEY,
    MEMORY_LLM_KEY,
    chat,
    memory_fields,
    start,
    wait_for_memory,
    wait_until,
    with_rid,
)
from tests.support.proxy import UPSTREAM_KEY, Proxy

SECRETS = (EMBED_KEY, MEMORY_LLM_KEY, UPSTREAM_KEY)


def _create(proxy: Proxy, validate: bool = True, **fields: Any) -> httpx.Response:
    body = {"name": "t", "llm_base_url": proxy.upstream_url, "llm_api_key": UPSTREAM_KEY}
    params = {} if validate else {"validate": "false"}
    return proxy.admin("POST", "/tokens", json={**body, **fields}, params=params)


def _refused(reply: httpx.Response, field: str, category: str) -> str:
    assert reply.status_code == 422, reply.text
    message: str = reply.json()["error"]["message"]
    assert message.startswith(f"{field}: "), message
    assert f"({category})" in message and "?validate=false" in message, message
    for secret in SECRETS:
        assert secret not in reply.text
    return message


def _cause(reply: httpx.Response) -> str:
    """The category a long-term 502 names: `Memory retrieval failed (longterm: <category>)`."""
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert error["type"] == "memory_retrieval_failed"
    assert error["request_id"] == reply.headers["x-request-id"]
    prefix = "Memory retrieval failed (longterm: "
    assert error["message"].startswith(prefix), error["message"]
    for secret in SECRETS:
        assert secret not in reply.text
    return str(error["message"][len(prefix) :].split(")", 1)[0])


def test_patch_to_an_unreachable_embedder_is_refused_and_saved_with_validate_false(
    proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    with_rid(logs)
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    down = {"embed_base_url": closed_port_url()}
    message = _refused(
        proxy.admin("PATCH", f"/tokens/{token_id}", json=down),
        "embed_base_url",
        "embedder_unreachable",
    )
    assert "the embedder could not be reached" in message
    # Nothing was saved.
    config = proxy.admin("GET", f"/tokens/{token_id}").json()["config"]
    assert config["embed_base_url"] == proxy.upstream_url
    assert chat(proxy, token, "still fine").status_code == 200

    saved = proxy.admin("PATCH", f"/tokens/{token_id}", json=down, params={"validate": "false"})
    assert saved.status_code == 200, saved.text
    assert saved.json()["config"]["embed_base_url"] == down["embed_base_url"]

    # The new embedder is a re-embed (docs/operations.md): until it is done the token recalls
    # from the old shard with the old embedder, so chats go on; the re-embed cannot reach the
    # new embedder, and the token's detail says so, with no secret.
    assert chat(proxy, token, "hello?").status_code == 200
    assert upstream.proxied_requests[-1].json["messages"][-1]["content"] == "hello?"
    detail = proxy.admin("GET", f"/tokens/{token_id}")
    assert detail.json()["reindex"]["episodic"]["state"] in ("running", "failed"), detail.text
    # The re-embed runs as a job: its failure is logged when the job gets to it.
    wait_until(
        lambda: any("embedder_unreachable" in r.getMessage() for r in logs.records),
        what="the re-embed's failure to reach the new embedder, logged",
    )
    text = "\n".join(r.getMessage() for r in logs.records) + detail.text
    for secret in SECRETS:
        assert secret not in text


def test_a_patch_that_leaves_long_term_memory_alone_is_not_probed(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    token_id, _ = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.embedding_status = 503
    before = len(upstream.requests)
    reply = proxy.admin("PATCH", f"/tokens/{token_id}", json={"session_window_size": 5})
    assert reply.status_code == 200, reply.text
    assert len(upstream.requests) == before
    # A change to the embedder is probed, and the 503 refuses it.
    change = {"embed_body": {"model": "bow-embed-2"}}
    _refused(
        proxy.admin("PATCH", f"/tokens/{token_id}", json=change),
        "embed_base_url",
        "embedder_error_503",
    )


def test_refused_keys_and_unreachable_memory_llms_are_named(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    upstream.embedding_status = 401
    upstream.embedding_error_body = {"error": {"message": f"Incorrect API key: {EMBED_KEY}"}}
    message = _refused(
        _create(proxy, **memory_fields(proxy.upstream_url)), "embed_api_key", "embedder_error_401"
    )
    assert "answered HTTP 401: Incorrect API key: ***" in message  # the upstream's words, scrubbed
    upstream.reset()

    fields = memory_fields(proxy.upstream_url, memory_llm_base_url=closed_port_url())
    _refused(_create(proxy, **fields), "memory_llm_base_url", "memory_llm_unreachable")
    # Both at once: both named, the embedder first.
    fields["embed_base_url"] = closed_port_url()
    message = _refused(_create(proxy, **fields), "embed_base_url", "embedder_unreachable")
    assert "memory_llm_base_url: " in message and "(memory_llm_unreachable)" in message
    assert [t["name"] for t in proxy.admin("GET", "/tokens").json()["data"]] == []


def test_vectors_of_another_size_than_embed_dims_are_refused(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    # Told not to send `dimensions`, the fake embedder answers its default 8-dim vectors.
    fields = memory_fields(proxy.upstream_url, dims=32)
    fields["embed_body"] = {"model": "bow-embed", "send_dimensions": False}
    message = _refused(_create(proxy, **fields), "embed_dims", "embedder_dimension_mismatch")
    assert "returns 8-dimensional vectors, not 32" in message
    fields["embed_dims"] = 8
    saved = _create(proxy, **fields)
    assert saved.status_code == 201
    # Mem0 is not told the size (public config, not a private switch): it sends none.
    token_id, token = saved.json()["id"], saved.json()["token"]
    assert chat(proxy, token, "My dog is called Rex").status_code == 200
    wait_for_memory(proxy, token_id, "My dog is called Rex")
    mem0_calls = [r.json for r in upstream.embedding_requests if "encoding_format" in r.json]
    assert mem0_calls and all("dimensions" not in body for body in mem0_calls)


def test_the_local_embedder_without_its_extra_is_refused(
    proxy: Proxy, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a `pip install memory-bridge` without the `local` extra.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    fields = memory_fields(proxy.upstream_url)
    for name in ("embed_base_url", "embed_api_key", "embed_body"):
        del fields[name]
    # A model of its own: the process-wide model cache must not hide the missing package.
    local = {**fields, "embed_provider": "local", "embed_dims": 384}
    local["embed_body"] = {"model": str(Path("no-such-model-dir").resolve())}
    message = _refused(_create(proxy, **local), "embed_provider", "local_embedder_unavailable")
    assert "no module 'sentence_transformers'" in message
    assert "pip install 'memory-bridge[local]'" in message

    saved = _create(proxy, validate=False, **local)
    assert saved.status_code == 201, saved.text
    assert _cause(chat(proxy, saved.json()["token"], "hi")) == "local_embedder_unavailable"


def test_a_provider_mem0_cannot_build_is_refused(proxy: Proxy, upstream: FakeUpstream) -> None:
    fields = memory_fields(proxy.upstream_url, memory_llm_provider="groq")
    message = _refused(_create(proxy, **fields), "memory_llm_provider", "config_error")
    assert "groq" in message
    saved = _create(proxy, validate=False, **fields)
    assert saved.status_code == 201
    assert _cause(chat(proxy, saved.json()["token"], "hi")) == "config_error"


@pytest.mark.parametrize(
    ("status", "category"), [(401, "embedder_error_401"), (503, "embedder_error_503")]
)
def test_embedder_errors_at_request_time_name_their_status(
    proxy: Proxy, upstream: FakeUpstream, status: int, category: str
) -> None:
    _, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.embedding_status = status
    upstream.embedding_error_body = {"error": {"message": f"no: {EMBED_KEY}"}}
    assert _cause(chat(proxy, token, "What do I like?")) == category
    assert upstream.proxied_requests == []


def test_a_vector_store_that_cannot_be_reached_is_a_vector_store_error(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    run = start(tmp_path / "data", upstream_server[1], qdrant_url=closed_port_url())
    try:
        _, token = run.proxy.create_token(**memory_fields(run.proxy.upstream_url))
        assert _cause(chat(run.proxy, token, "hello")) == "vector_store_error"
    finally:
        run.server.stop()


def test_a_search_past_its_deadline_is_a_timeout(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    run = start(tmp_path / "data", upstream_server[1], memory_search_timeout=1.0)
    try:
        _, token = run.proxy.create_token(**memory_fields(run.proxy.upstream_url))
        wait_until(lambda: chat(run.proxy, token, "warm up").status_code == 200, what="warm-up")
        upstream.hold_embeddings()
        assert _cause(chat(run.proxy, token, "slow?")) == "timeout"
    finally:
        upstream.release_embeddings()
        run.server.stop()


def test_retry_after_only_where_retrying_can_help(
    mem0_proxy: Proxy, upstream: FakeUpstream
) -> None:
    # Mem0 alone, so each chat asks the embedder exactly once (episodic recall would too).
    proxy = mem0_proxy
    _, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.embedding_status = 503
    transient = chat(proxy, token, "now?")
    assert transient.headers.get("retry-after") == "5"
    upstream.embedding_status = 401
    refused = chat(proxy, token, "now?")
    assert "retry-after" not in refused.headers
    assert refused.headers.get("x-should-retry") == "false"
    # The openai SDK (2 retries by default) asks once, not three times, when retrying is futile.
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=token, max_retries=2)
    before = len(upstream.embedding_requests)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 502
    assert "embedder_error_401" in str(caught.value)
    assert len(upstream.embedding_requests) == before + 1


def test_the_502_names_its_cause_in_what_the_openai_sdk_raises(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    _, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    upstream.embedding_status = 401
    with pytest.raises(openai.APIStatusError) as caught:
        proxy.client(token).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 502
    assert "longterm: embedder_error_401" in str(caught.value)


@pytest.mark.skipif(not local_extra_installed(), reason="the local extra is not installed")
def test_the_packaged_local_model_with_other_dims_is_refused_naming_its_size(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    fields = memory_fields(proxy.upstream_url)
    for name in ("embed_base_url", "embed_api_key", "embed_body"):
        fields.pop(name)
    message = _refused(
        _create(proxy, **{**fields, "embed_provider": "local", "embed_dims": 1536}),
        "embed_dims",
        "dims_mismatch",
    )
    assert "set embed_dims to 384" in message
    token_id = _create(proxy, **{**fields, "embed_provider": "local", "embed_dims": 384})
    assert token_id.status_code == 201, token_id.text
    patched = proxy.admin("PATCH", f"/tokens/{token_id.json()['id']}", json={"embed_dims": 1536})
    assert "set embed_dims to 384" in _refused(patched, "embed_dims", "dims_mismatch")
    # The int8 variant is the same model: its size is known at save time too.
    int8 = {"embed_provider": "local", "embed_body": {"model": "all-MiniLM-L6-v2-int8"}}
    message = _refused(
        _create(proxy, **{**fields, **int8, "embed_dims": 1536}), "embed_dims", "dims_mismatch"
    )
    assert "(all-MiniLM-L6-v2-int8) makes 384-dim" in message


def test_an_api_embedder_without_a_memory_llm_runs_episodic_memory_alone(
    proxy: Proxy, upstream: FakeUpstream
) -> None:
    fields = {k: v for k, v in memory_fields(proxy.upstream_url).items() if k.startswith("embed_")}
    made = _create(proxy, **fields)
    assert made.status_code == 201, made.text
    layers = made.json()["memory_layers"]
    assert layers["longterm"].startswith("off"), layers
    assert layers["episodic"].startswith("on (openai:bow-embed, 32 dims"), layers
    token_id = made.json()["id"]
    assert chat(proxy, made.json()["token"], "I keep bees").status_code == 200
    counts = wait_drained(proxy.url, proxy.admin_token, token_id)
    assert counts["episodic"] == {"done": 1} and "longterm" not in counts, counts
