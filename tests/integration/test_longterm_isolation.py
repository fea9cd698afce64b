"""Two tokens and several end users never see each other's long-term memories."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor

from tests.fakes.upstream import FakeUpstream
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

WORDS = (  # noqa: SIM905
    "amber basil cedar delta ember fjord garnet harbor indigo juniper kestrel lagoon maple "
    "nectar onyx pebble quartz raven saffron tundra umber violet willow xenon yarrow zephyr"
).split()


def test_randomised_interleaved_turns_stay_in_their_namespace(
    running: Running, upstream: FakeUpstream
) -> None:
    seed = int(os.environ.get("LONGTERM_SEED", random.randrange(1_000_000)))
    rng = random.Random(seed)
    proxy = running.proxy
    # 256 dimensions: no two of these facts' bag-of-words vectors reach the forge's
    # near-duplicate cosine (0.95), whatever the seed; in 32, hash collisions made
    # "Fact 16 ... kestrel" the same vector as "Fact 12 ... zephyr" (seed 616690).
    fields = memory_fields(proxy.upstream_url, dims=256, memory_limit=100)
    tokens = {name: proxy.create_token(name=name, **fields) for name in ("A", "B")}
    users = ["", "alice", "bob smith"]
    facts: dict[tuple[str, str], set[str]] = {(t, u): set() for t in tokens for u in users}
    turns = []
    for n, word in enumerate(rng.sample(WORDS, 24)):
        key = (rng.choice(list(tokens)), rng.choice(users))
        fact = f"Fact {n}: my code word is {word}"
        facts[key].add(fact)
        turns.append((key, fact, f"session-{rng.randrange(3)}"))

    def send(turn: tuple[tuple[str, str], str, str]) -> int:
        (token_name, user), fact, session = turn
        token = tokens[token_name][1]
        return chat(proxy, token, fact, user=user or None, session=session).status_code

    # Interleaved and concurrent: adds of different namespaces run side by side in the pool.
    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(send, turns)) == {200}, f"seed {seed}"
    for (token_name, user), expected in facts.items():
        token_id = tokens[token_name][0]
        wait_until(
            lambda token_id=token_id, user=user, expected=expected: (
                memory_texts(proxy, token_id, user) == expected
            ),
            what=f"memories of {token_name}/{user!r} (seed {seed})",
        )

    for (token_name, user), expected in facts.items():
        token = tokens[token_name][1]
        assert chat(proxy, token, "what is my code word", user=user or None).status_code == 200
        injected = set(memory_block(forwarded_recall(upstream)))
        # Everything this namespace stored, and nothing of any other namespace.
        assert injected == expected, f"{token_name}/{user!r}, seed {seed}"


def test_tokens_with_different_embedding_sizes_both_work(
    running: Running, upstream: FakeUpstream
) -> None:
    proxy = running.proxy
    small_id, small = proxy.create_token(name="small", **memory_fields(proxy.upstream_url, dims=16))
    large_id, large = proxy.create_token(name="large", **memory_fields(proxy.upstream_url, dims=48))
    assert chat(proxy, small, "My boat is named Ariel").status_code == 200
    assert chat(proxy, large, "My boat is named Bounty").status_code == 200
    wait_until(lambda: memory_texts(proxy, small_id) == {"My boat is named Ariel"})
    wait_until(lambda: memory_texts(proxy, large_id) == {"My boat is named Bounty"})

    # Asked in a new session: in the first one the fact is in the injected history already.
    assert chat(proxy, small, "What is my boat named?", session="q").status_code == 200
    assert memory_block(forwarded_recall(upstream)) == ["My boat is named Ariel"]
    assert chat(proxy, large, "What is my boat named?", session="q").status_code == 200
    assert memory_block(forwarded_recall(upstream)) == ["My boat is named Bounty"]

    # The embedder was asked for each token's own size, into shards of that size.
    sizes = {r.json["dimensions"] for r in upstream.embedding_requests}
    assert sizes == {16, 48}
    model = "mem0:bow-embed"
    assert running.shards() == [(small_id, model, 16), (large_id, model, 48)]
