"""Vector shards are optimised by the job worker once they have grown by a threshold: in the
background, one shard at a time, never in a request; recall keeps answering during the build."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_bridge.http.services import services_of_app
from memory_bridge.vectors import edge_optimize
from memory_bridge.vectors.edge import EdgeEngine
from memory_bridge.vectors.optimizer import ShardOptimizer
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.integration.test_vectors_adapters import hashed, point
from tests.support.chat_helpers import say
from tests.support.longterm_support import forwarded_recall, memory_fields, wait_until
from tests.support.loopback import LoopbackServer
from tests.support.proxy import Proxy, start_proxy

THRESHOLD = 6  # points: three turns of two messages


@pytest.fixture
def served(
    tmp_path: Path, upstream_server: tuple[FakeUpstream, str]
) -> Iterator[tuple[LoopbackServer, Proxy]]:
    server, proxy = start_proxy(
        tmp_path / "data", upstream_server[1], vector_optimize_threshold=THRESHOLD
    )
    try:
        yield server, proxy
    finally:
        server.stop()


def _indexed(proxy: Proxy, token_id: int) -> bool:
    counts = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"].get("episodic")
    return bool(counts) and set(counts) == {"done"}


def test_a_shard_past_the_threshold_is_optimised_once_by_the_worker_while_recall_goes_on(
    served: tuple[LoopbackServer, Proxy], upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, proxy = served
    optimizer: ShardOptimizer = services_of_app(server.app).memory.optimizer
    upstream.memory_responder = lambda _: Scenario(content=json.dumps({"memory": []}))
    started, go = threading.Event(), threading.Event()
    builds: list[Path] = []
    real = edge_optimize.run_optimizer

    def held(copy: Path, timeout: float) -> bool:
        builds.append(copy)
        started.set()
        assert go.wait(60), "the test never let the build go on"
        return real(copy, timeout)

    monkeypatch.setattr(edge_optimize, "run_optimizer", held)
    try:
        _run(proxy, upstream, optimizer, started, go, builds)
    finally:
        go.set()  # never leave the build thread waiting


def _run(
    proxy: Proxy,
    upstream: FakeUpstream,
    optimizer: ShardOptimizer,
    started: threading.Event,
    go: threading.Event,
    builds: list[Path],
) -> None:
    fields: dict[str, Any] = memory_fields(proxy.upstream_url, embed_body={"model": "bow-words"})
    token_id, token = proxy.create_token(**fields)
    other_id, other = proxy.create_token(name="other", **fields)

    # Two turns (4 points): under the threshold, nothing is built.
    say(proxy, token, "My sister Ingrid lives in Trondheim", "monday")
    say(proxy, token, "I bought a red kayak", "monday")
    wait_until(lambda: _indexed(proxy, token_id), what="the episodic jobs")
    assert not started.wait(0.5) and optimizer.runs == []

    # The third turn takes the shard to 6 points: one build starts, in the background.
    say(proxy, token, "The kayak is kept in the boathouse", "monday")
    assert started.wait(30), "no optimisation started"
    assert optimizer.running is not None and optimizer.running.token_id == token_id
    # Recall (and indexing) keep working while it runs.
    say(proxy, token, "Where does Ingrid live?", "friday")
    assert "My sister Ingrid lives in Trondheim" in forwarded_recall(upstream)
    # Another shard past the threshold meanwhile waits its turn: one build at a time.
    for text in ("one apple", "two pears", "three plums"):
        say(proxy, other, text, "s")
    wait_until(lambda: _indexed(proxy, other_id), what="the other token's episodic jobs")
    assert len(builds) == 1

    go.set()
    wait_until(lambda: len(optimizer.runs) == 2, what="both optimisations")
    first, second = optimizer.runs
    assert (first.key.token_id, second.key.token_id) == (token_id, other_id)
    assert first.grown >= THRESHOLD and first.changed is not None
    assert optimizer.running is None and len(builds) == 2
    # After the swap the shard answers as before, and nothing more is built for it.
    say(proxy, token, "Where does Ingrid live?", "saturday")
    assert "My sister Ingrid lives in Trondheim" in forwarded_recall(upstream)
    wait_until(lambda: _indexed(proxy, token_id), what="the episodic jobs")
    assert len(optimizer.runs) == 2


def test_a_growing_shard_is_optimised_again_after_growing_by_half(tmp_path: Path) -> None:
    """Rebuilt at the threshold, then only once grown by half its size then: a rule checked
    synchronously on the optimizer's own step (its thread would make "not yet" a race)."""
    optimizer = ShardOptimizer(threshold=2)
    engine = optimizer.track(EdgeEngine(tmp_path))
    try:
        index = engine.index(1, "model-a", 64)
        key = index.key

        def add(n: int, tag: str) -> None:
            index.upsert([point(f"{tag} {i}", hashed(f"{tag}{i}"), user="ada") for i in range(n)])

        add(10, "first")
        optimizer._maybe_optimise(key, index)
        assert [run.grown for run in optimizer.runs] == [10]
        add(3, "second")  # past the threshold (2), short of half the shard (5)
        optimizer._maybe_optimise(key, index)
        assert len(optimizer.runs) == 1
        add(2, "third")
        optimizer._maybe_optimise(key, index)
        assert [run.grown for run in optimizer.runs] == [10, 5]
        assert all(run.changed is not None for run in optimizer.runs)
    finally:
        optimizer.close()
        engine.close()
