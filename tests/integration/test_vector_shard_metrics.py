"""`/metrics` shows the bound on open vector shards at work: how many are open, how many are
parked (closed to make room), the bound, and how often a parked shard was opened again.

One shard per token (episodic memory on the token's own embedder, the fake's bag of words) and
a bound of one: the second token's shard parks the first, whose next recall reopens it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.upstream import FakeUpstream
from tests.support.hybrid_memory_support import Served
from tests.support.jobs_support import wait_drained
from tests.support.longterm_support import episodic_embedder
from tests.support.proxy import Proxy


def _metrics(proxy: Proxy) -> dict[str, float]:
    reply = httpx.get(f"{proxy.url}/metrics", headers=proxy.admin_headers, timeout=10)
    assert reply.status_code == 200, reply.text
    found = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.name.startswith("memorybridge_vector_shard"):
                assert sample.labels == {}  # no token, path or model in a label
                found[sample.name] = sample.value
    return found


def _say(proxy: Proxy, token: str, text: str) -> None:
    reply = proxy.chat(
        token, {"X-Session-Id": "s"}, model="m", messages=[{"role": "user", "content": text}]
    )
    assert reply.status_code == 200, reply.text


@pytest.fixture
def served(
    tmp_path: Path, upstream: FakeUpstream, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[Served]:
    served = Served(tmp_path / "data", upstream_server[1], vector_max_open_shards=1)
    try:
        yield served
    finally:
        served.drain()


def test_metrics_show_open_and_parked_shards_and_each_reopen(served: Served) -> None:
    proxy = served.proxy
    first_id, first = proxy.create_token(name="a", **episodic_embedder(proxy.upstream_url))
    second_id, second = proxy.create_token(name="b", **episodic_embedder(proxy.upstream_url))
    _say(proxy, first, "My bicycle is a green Gazelle")
    wait_drained(proxy.url, proxy.admin_token, first_id)
    seen = _metrics(proxy)
    assert seen["memorybridge_vector_shards_open"] == 1
    assert seen["memorybridge_vector_shards_parked"] == 0
    assert seen["memorybridge_vector_shards_max_open"] == 1
    reopens = seen["memorybridge_vector_shard_reopens_total"]  # the process's: other tests add

    _say(proxy, second, "My kayak is a yellow Prijon")  # its shard parks the first one
    wait_drained(proxy.url, proxy.admin_token, second_id)
    seen = _metrics(proxy)
    assert (seen["memorybridge_vector_shards_open"], seen["memorybridge_vector_shards_parked"]) == (
        1,
        1,
    )
    assert seen["memorybridge_vector_shard_reopens_total"] == reopens

    _say(proxy, first, "Which bicycle do I ride?")  # its recall reopens the parked shard
    wait_drained(proxy.url, proxy.admin_token, first_id)
    seen = _metrics(proxy)
    assert (seen["memorybridge_vector_shards_open"], seen["memorybridge_vector_shards_parked"]) == (
        1,
        1,
    )
    assert seen["memorybridge_vector_shard_reopens_total"] == reopens + 1
