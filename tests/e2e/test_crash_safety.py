"""Crash safety with real processes: kill -9 `memory-bridge serve` while turns are served and
their memory work is pending, restart it on the same data directory, let the queue drain, and
check that no completed turn lost or duplicated its memory writes.

The server is a child process with long-term memory (Mem0 over the embedded engine) and the
Memory Gateway on. Its LLM, embedder and Gateway are fakes served from this process (so they
outlive every kill and record what they received): Mem0's extraction answers slowly, each
embedding is delayed, and the Gateway takes a while to answer an add, so work is in flight
when the kill lands. Each extraction answer carries a per-call counter (`<text> #<n>`): Mem0's
own hash dedup cannot hide a turn written twice. The embedder is the fake's hash embedder, not
its bag-of-words one: the turns' texts differ only in a few numbers and a word, and in 32
bag-of-words dimensions two of them collide often enough (e.g. "trial 4 bo turn 1 likes violins
#7" and "trial 7 bo turn 1 likes violins #20" have cosine 1.0) that the consolidation job merges
one turn's fact into another's, as it should for the same fact said twice. Hashed texts are
unrelated vectors: no two turns' facts, nor two writes of one turn, are near duplicates, and a
merge or supersession here is a failure of its own.

In each of `TRIALS` trials, two end users (one session each) send turns (streamed or not, at
random) while a seeded RNG picks the moment of the kill: a random delay, or just after a Mem0
extraction or a Gateway add arrived at the fakes, or after the clients are done (work only in
the queue). The server is restarted, and the admin API is polled until no job is pending or
running: within `RESUME_WITHIN` seconds of the restart, though `JOB_LEASE_SECONDS` is far longer
(the restarted server gives back at start-up the leases of the process it replaces, which is
gone; it does not wait for them to expire). Then, over everything sent so far:

- every turn whose response completed (200 and its whole body) is stored, once; a turn whose
  response did not complete is stored at most once (the kill may land after its commit);
- no event without its jobs: every `session.appended` has one job per consumer
  (read from the SQLite file, read-only), and no job without its event;
- every stored turn's Mem0 memories exist exactly once (its long-term job `done`), and no
  memory exists for a turn that was not stored; no fact was merged or superseded;
- every stored turn has exactly one Gateway add received and a `done` job, or an `unknown`
  job and at most one add; never two adds of a turn; never a flush without its add.

At the end the server is stopped and the engine's shards are read directly: exactly one
memory per stored turn's event id (the `event_id` metadata tag), none with another tag.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.gateway import FakeGateway
from tests.fakes.upstream import DEFAULT_REPLY, FakeUpstream, Scenario
from tests.support.hybrid_memory_support import gateway_memory
from tests.support.jobs_support import (
    OPEN,
    JobRow,
    StoredTurn,
    assert_gateway_sessions,
    event_ids,
    job_rows,
    poll,
    read_only,
    stored_turns,
    wait_drained,
)
from tests.support.longterm_support import memory_fields
from tests.support.loopback import LoopbackServer
from tests.support.proxy import UPSTREAM_KEY
from tests.support.serve import ServeProcess, init_data_dir, serve_env
from tests.support.tagged_memories import (
    CountingExtractor,
    per_turn,
    stored_engine,
    tagged_memories,
)

pytestmark = pytest.mark.serial  # kill -9 in a loop, each restart within a bound

TRIALS = 20
SEED = int(os.environ.get("MEMORY_BRIDGE_CRASH_SEED", "20261123"))  # another seed: new kills
USERS = ("ana", "bo")  # one session each: two Mem0 namespaces, two Gateway sessions
TURNS_PER_USER = 2
EXTRACTION_DELAY = 0.25  # Mem0's LLM call
EMBEDDING_DELAY = 0.05  # every embeddings call (recall, Mem0's search and its write)
GATEWAY_ADD_DELAY = 0.4
LEASE_SECONDS = 600  # a dead process's leases never expire within the test
RESUME_WITHIN = 30.0  # seconds from the restart to every completed turn's work done (issue 23)
CLIENT_TIMEOUT = 20.0
TRIGGERS = ("delay", "mem0", "gateway", "after", "inflight")
INFLIGHT_DELAY = 2.0  # the upstream's answer, held while the kill lands (trigger "inflight")
NOT_STORED = b": memorybridge stored=false"
CONSUMERS = {"longterm", "gateway"}
# Unrelated vectors for unrelated texts (`tests.fakes.upstream.embeddings`): no turn's fact is a
# near duplicate of another's, so consolidation (on by default) has nothing to merge.
EMBEDDER = {"model": "hash-embed"}
CONSOLIDATED = ("longterm.merged", "longterm.superseded")


@dataclass
class Sent:
    trial: int
    user: str
    text: str
    streamed: bool
    completed: bool = False
    not_stored: bool = False  # the response said so (must never happen here)


@dataclass
class Harness:
    workdir: Path
    env: dict[str, str]
    admin: str
    upstream: FakeUpstream
    extractor: CountingExtractor
    gateway: FakeGateway
    server: ServeProcess
    token_id: int = 0
    token: str = ""
    sent: list[Sent] = field(default_factory=list)
    starts: int = 1
    open_at_restart: int = 0  # jobs a kill left pending or running, over all trials

    @property
    def db_path(self) -> Path:
        return self.workdir / "data" / "memory_bridge.db"

    def restart(self) -> None:
        self.server = ServeProcess.start(self.env, self.workdir, name=f"serve-{self.starts}")
        self.starts += 1

    def kill(self) -> None:
        os.killpg(self.server.pid, signal.SIGKILL)
        self.server.proc.wait(30)

    def admin_get(self, path: str, **params: Any) -> Any:
        reply = httpx.get(
            f"{self.server.url}/v1/admin{path}",
            params=params,
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=30,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        return reply.json()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    upstream = FakeUpstream()
    extractor = CountingExtractor(delay=EXTRACTION_DELAY)
    upstream.memory_responder = extractor
    upstream.embedding_delay = EMBEDDING_DELAY
    gateway = FakeGateway(hang_seconds=GATEWAY_ADD_DELAY)
    gateway.fail("add", "timeout")  # a slow add that succeeds (the token waits longer)
    env = serve_env(
        tmp_path / "data",
        JOB_LEASE_SECONDS=str(LEASE_SECONDS),
        JOB_POLL_SECONDS="0.1",
        JOB_BACKOFF_SECONDS="0.1",
        JOB_MAX_ATTEMPTS="50",  # every kill costs an attempt; none may run out
        BACKGROUND_DRAIN_TIMEOUT="5",
    )
    admin = init_data_dir(env, tmp_path)
    with LoopbackServer(upstream.app) as up, LoopbackServer(gateway.app) as gw:
        server = ServeProcess.start(env, tmp_path, name="serve-0")
        h = Harness(tmp_path, env, admin, upstream, extractor, gateway, server)
        try:
            body = {
                "name": "crash",
                "llm_base_url": up.url,
                "llm_api_key": UPSTREAM_KEY,
                **memory_fields(up.url, embed_body=EMBEDDER),
                "memory": gateway_memory(gw.url, timeoutSeconds=10),
            }
            reply = httpx.post(
                f"{server.url}/v1/admin/tokens",
                json=body,
                headers={"Authorization": f"Bearer {admin}"},
                timeout=30,
                trust_env=False,
            )
            assert reply.status_code == 201, reply.text
            h.token_id, h.token = reply.json()["id"], reply.json()["token"]
            yield h
        finally:
            h.server.stop()
            gateway.release()


# ---- one turn, as a client sees it ------------------------------------------------------


def send(url: str, token: str, turn: Sent) -> None:
    """Send one turn; `turn.completed` only when the whole response arrived."""
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "user": turn.user,
        "messages": [{"role": "user", "content": turn.text}],
    }
    headers = {"Authorization": f"Bearer {token}", "X-Session-Id": f"chat-{turn.user}"}
    try:
        if turn.streamed:
            body["stream"] = True
            with httpx.stream(
                "POST",
                f"{url}/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=CLIENT_TIMEOUT,
                trust_env=False,
            ) as reply:
                raw = reply.read()
            turn.not_stored = NOT_STORED in raw
            turn.completed = reply.status_code == 200 and raw.endswith(b"data: [DONE]\n\n")
        else:
            reply = httpx.post(
                f"{url}/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=CLIENT_TIMEOUT,
                trust_env=False,
            )
            turn.not_stored = reply.headers.get("x-memorybridge-stored") == "false"
            turn.completed = (
                reply.status_code == 200
                and reply.json()["choices"][0]["message"]["content"] == DEFAULT_REPLY
            )
    except (httpx.TransportError, ValueError):
        turn.completed = False  # the server died under it (a cut body is not JSON either)


def user_turns(url: str, token: str, turns: list[Sent]) -> None:
    for turn in turns:
        send(url, token, turn)
        if not turn.completed:
            return  # the server is gone: the rest of this user's turns are never sent


# ---- one trial -------------------------------------------------------------------------


def run_trial(h: Harness, trial: int, rng: random.Random) -> str:
    """Send this trial's turns and kill the server at a moment the RNG picks; the trigger."""
    plan: dict[str, list[Sent]] = {user: [] for user in USERS}
    for user, turns in plan.items():
        for k in range(TURNS_PER_USER):
            text = f"trial {trial} {user} turn {k} likes {rng.choice(WORDS)}"
            turns.append(Sent(trial, user, text, streamed=rng.random() < 0.5))
    # The first trial always kills with a reply in flight, so cut turns are seen on any
    # machine, however fast its turns complete.
    trigger = "inflight" if trial == 0 else rng.choice(TRIGGERS)
    pause = rng.uniform(0.0, 1.0)
    seen = len(h.upstream.proxied_requests)
    if trigger == "inflight":
        h.upstream.responder = lambda _: Scenario(delay=INFLIGHT_DELAY)
    extractions, adds = h.extractor.calls, len(h.gateway.payloads("add"))
    url = h.server.url
    threads = [
        threading.Thread(target=user_turns, args=(url, h.token, turns), daemon=True)
        for turns in plan.values()
    ]
    for thread in threads:
        thread.start()
    try:
        if trigger == "delay":
            time.sleep(pause * 1.5)
        elif trigger == "mem0":
            poll(lambda: h.extractor.calls > extractions, "a Mem0 extraction", timeout=20)
            time.sleep(pause * (EXTRACTION_DELAY + 2 * EMBEDDING_DELAY))
        elif trigger == "inflight":
            poll(lambda: len(h.upstream.proxied_requests) > seen, "a forwarded chat", timeout=20)
            time.sleep(pause * INFLIGHT_DELAY / 2)
        elif trigger == "gateway":
            poll(lambda: len(h.gateway.payloads("add")) > adds, "a Gateway add", timeout=20)
            time.sleep(pause * GATEWAY_ADD_DELAY)
        else:
            for thread in threads:
                thread.join(CLIENT_TIMEOUT + 5)
            time.sleep(pause * 0.5)
    finally:
        h.kill()
        h.upstream.responder = None
        for thread in threads:
            thread.join(CLIENT_TIMEOUT + 5)
    for turns in plan.values():
        h.sent.extend(turns)
    return trigger


WORDS = ("tea", "chess", "rain", "violins", "kites", "ramen", "maps", "owls", "jazz", "figs")


# ---- the checks ------------------------------------------------------------------------


def added_texts(gateway: FakeGateway) -> Counter[str]:
    """Gateway adds received per turn text (a cut or a hung one counts: it may have landed)."""
    return Counter(str(p["messages"][0]["content"]) for p in gateway.payloads("add"))


def consolidation_events(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Every merge or supersession logged: its type, the fact that went, and the one kept."""
    marks = ", ".join("?" * len(CONSOLIDATED))
    rows = conn.execute(
        "select type, coalesce(json_extract(payload, '$.text'), ''), "
        "coalesce(json_extract(payload, '$.into_text'), json_extract(payload, '$.by_text'), '') "
        f"from memory_events where type in ({marks}) order by id",
        CONSOLIDATED,
    ).fetchall()
    return [(str(kind), str(gone), str(kept)) for kind, gone, kept in rows]


def check(h: Harness) -> tuple[list[StoredTurn], dict[str, dict[str, JobRow]]]:
    """Everything sent so far, once the queue has drained."""
    with read_only(h.db_path) as conn:
        turns = [t for t in stored_turns(conn) if t.token_id == h.token_id]
        jobs = job_rows(conn)
        events = event_ids(conn)
        consolidated = consolidation_events(conn)
    by_event: dict[str, dict[str, JobRow]] = defaultdict(dict)
    for job in jobs:
        assert job.consumer not in by_event[job.event_id], f"two {job.consumer} jobs: {job}"
        by_event[job.event_id][job.consumer] = job
        assert job.event_id in events, f"a job without its event: {job}"
        assert job.status not in OPEN, f"not drained: {job}"

    # Turns: a completed one is stored, once; nothing is stored that was not sent.
    assert not [s for s in h.sent if s.not_stored], "a turn was refused by the database"
    stored = Counter(t.query for t in turns)
    assert max(stored.values(), default=1) == 1, f"a turn stored twice: {stored.most_common(3)}"
    completed = {s.text for s in h.sent if s.completed}
    assert completed <= set(stored), f"completed but not stored: {completed - set(stored)}"
    assert set(stored) <= {s.text for s in h.sent}
    assert {t.user for t in turns} <= set(USERS)

    # No event without its jobs: one per consumer of the token (Mem0 and the Gateway, and any
    # other layer its config turns on, e.g. episodic memory), every one ended.
    consumers = set(by_event[turns[0].event_id]) if turns else CONSUMERS
    assert consumers >= CONSUMERS, consumers
    for turn in turns:
        its = by_event[turn.event_id]
        assert set(its) == consumers, f"{turn} has {its}"
        for name in consumers - {"gateway"}:
            assert its[name].status == "done", its[name]

    # Mem0: exactly once per stored turn, nothing for a turn that was not stored. A merge would
    # take a turn's fact away on purpose: never here, where no two turns say the same thing.
    assert not consolidated, f"facts merged or superseded: {consolidated}"
    listed = h.admin_get(f"/tokens/{h.token_id}/memories", limit=1000)
    assert listed["total"] == len(listed["data"])
    memories = per_turn(m["memory"] for m in listed["data"])
    for turn in turns:
        job = by_event[turn.event_id]["longterm"]
        assert job.status == "done", job
        assert memories[turn.query] == 1, f"{turn.query!r}: {memories[turn.query]} memories"
    assert set(memories) == set(stored), set(memories) ^ set(stored)

    # Gateway: one add and done, or unknown and at most one add; never two.
    adds = added_texts(h.gateway)
    assert max(adds.values(), default=1) == 1, f"a turn added twice: {adds.most_common(3)}"
    assert set(adds) <= set(stored), f"an add of a turn never stored: {set(adds) - set(stored)}"
    for turn in turns:
        job = by_event[turn.event_id]["gateway"]
        if job.status == "done":
            assert adds[turn.query] == 1 and job.step == "add_ok", job
        else:
            assert job.status == "unknown" and job.step == "add_unknown", job
    assert_gateway_sessions(h.gateway)
    return turns, by_event


def test_kill_9_in_a_loop_loses_and_duplicates_no_memory_write(harness: Harness) -> None:
    h = harness
    rng = random.Random(SEED)
    triggers: Counter[str] = Counter()
    for trial in range(TRIALS):
        triggers[run_trial(h, trial, rng)] += 1
        h.restart()
        with read_only(h.db_path) as conn:
            h.open_at_restart += sum(1 for j in job_rows(conn) if j.status in OPEN)
        wait_drained(h.server.url, h.admin, h.token_id, timeout=RESUME_WITHIN)
        turns, by_event = check(h)

    # The loop did what it is for: kills landed with memory work pending, completed and
    # cut turns were both seen.
    assert h.open_at_restart > 0
    assert any(s.completed for s in h.sent) and any(not s.completed for s in h.sent)

    # Finally, the tags themselves: the server stops, its local Qdrant storage is read.
    h.server.stop()
    # uvicorn re-raises the signal it shut down on: -SIGTERM is its clean exit.
    assert h.server.proc.returncode in (0, -signal.SIGTERM), h.server.log_tail()
    with stored_engine(h.workdir / "data") as engine:
        found = tagged_memories(engine, h.token_id)
    tags = Counter(m.event_id for m in found)
    assert tags == Counter({t.event_id: 1 for t in turns}), tags
    by_id = {t.event_id: t for t in turns}
    for memory in found:
        assert memory.text.rsplit(" #", 1)[0] == by_id[memory.event_id].query
    unknown = sum(1 for jobs in by_event.values() if jobs["gateway"].status == "unknown")
    retried = sum(1 for jobs in by_event.values() if jobs["longterm"].attempts > 1)
    print(
        f"\n{TRIALS} trials, triggers {dict(triggers)}: {len(h.sent)} turns sent, "
        f"{sum(s.completed for s in h.sent)} completed, {len(turns)} stored; "
        f"{h.open_at_restart} job(s) open at a restart, {retried} Mem0 job(s) retried, "
        f"{unknown} Gateway add(s) unknown; consumers {sorted(by_event[turns[0].event_id])}"
    )
