"""Four `memory-bridge worker` processes drain one PostgreSQL queue of 2,000 jobs: each job runs
once, the jobs of a session run in order, and a worker killed (kill -9) mid-job has its jobs
picked up by the others once their leases expire.

The jobs are real: `memory-bridge serve --no-worker` (serving only) answers 2,000 chat turns of
one token with the Memory Gateway on, over 50 sessions whose turns are sent one after another,
so each turn commits a `session.appended` event and its Gateway job (add → flush). Then four
workers start on the same database. The fake Gateway (served from this process) records every
add with its turn text; midway it starts holding adds unanswered, so every worker has an add in
flight, and one worker is killed. Its jobs stay `running` until their lease expires; then
another worker claims each again: an add that was in flight ends `unknown` (it may have landed:
never sent twice), any other job of the victim is finished normally.

Checked from the database and the fake: every job ended (`done`, or `unknown` for the victim's
adds in flight); every job but the victim's ran once (`attempts == 1`) and the victim's were
claimed a second time; every turn reached the Gateway exactly once (an unknown one at most once);
per session, adds arrive in turn order, each followed by its flush before the next add.
The drain rate (jobs/s, measured between the 100th and the 600th add, before the hold) is
printed; nothing is asserted about it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest

from tests.fakes.gateway import FakeGateway
from tests.support.databases import fresh_postgres_url, needs_postgres
from tests.support.hybrid_memory_support import gateway_memory
from tests.support.jobs_support import assert_gateway_sessions, poll
from tests.support.loopback import LoopbackServer
from tests.support.serve import (
    STOP_TIMEOUT,
    ServeProcess,
    init_data_dir,
    serve_env,
    start_bench_upstream,
)

# kill -9 of a worker, leases that expire, 2,000 turns and four workers on two cores
pytestmark = [needs_postgres, pytest.mark.postgres, pytest.mark.serial]

SESSIONS = 50
TURNS = 40  # per session: 2,000 jobs
WORKERS = 4
LEASE_SECONDS = 5
HOLD_AFTER_ADDS = 600
RATE_FROM = 100
TURN_TEXT = re.compile(r"^s(\d+) turn (\d+)$")


@dataclass
class Setup:
    workdir: Path
    env: dict[str, str]
    admin: str
    pg_url: str
    server: ServeProcess
    gateway: FakeGateway
    token_id: int
    token: str


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    gateway = FakeGateway(hang_seconds=120)
    with (
        fresh_postgres_url() as pg_url,
        LoopbackServer(gateway.app) as gw,
        start_bench_upstream(tmp_path) as upstream,
    ):
        env = serve_env(
            tmp_path / "data",
            DATABASE_URL=pg_url,
            JOB_LEASE_SECONDS=str(LEASE_SECONDS),
            JOB_POLL_SECONDS="0.2",
            JOB_CONCURRENCY="8",
            BACKGROUND_DRAIN_TIMEOUT="5",
            # The jobs are the Gateway's, one per turn; the embedded vector engine belongs to
            # one process, so episodic jobs need a Qdrant server with separate workers.
            EPISODIC_MEMORY="false",
            # Every turn's job pending, none deferred by the backlog's bounds: this is about
            # workers draining one queue (the bounds have their own tests).
            JOB_MAX_PENDING_PER_TOKEN="100000",
            JOB_MAX_PENDING="100000",
        )
        admin = init_data_dir(env, tmp_path)
        argv = [sys.executable, "-m", "memory_bridge", "serve", "--no-worker"]
        with ServeProcess.start(env, tmp_path, name="serve", argv=argv) as server:
            reply = httpx.post(
                f"{server.url}/v1/admin/tokens",
                json={
                    "name": "workers",
                    "llm_base_url": upstream.url,
                    "llm_api_key": "sk-bench",
                    "memory": gateway_memory(gw.url, timeoutSeconds=60),
                },
                headers={"Authorization": f"Bearer {admin}"},
                timeout=30,
                trust_env=False,
            )
            assert reply.status_code == 201, reply.text
            created = reply.json()
            try:
                yield Setup(
                    tmp_path, env, admin, pg_url, server, gateway, created["id"], created["token"]
                )
            finally:
                gateway.release()


def send_turns(url: str, token: str) -> None:
    """SESSIONS sessions at once, each sending its TURNS turns one after another."""

    async def session(client: httpx.AsyncClient, s: int) -> None:
        for k in range(TURNS):
            reply = await client.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"s{s} turn {k}"}]},
                headers={"Authorization": f"Bearer {token}", "X-Session-Id": f"session-{s}"},
            )
            assert reply.status_code == 200, reply.text
            assert "x-memorybridge-stored" not in reply.headers

    async def main() -> None:
        limits = httpx.Limits(max_connections=SESSIONS)
        async with httpx.AsyncClient(timeout=60, limits=limits, trust_env=False) as client:
            await asyncio.gather(*(session(client, s) for s in range(SESSIONS)))

    asyncio.run(main())


class Worker:
    """One `memory-bridge worker` child process, its output in a log file."""

    def __init__(self, env: dict[str, str], workdir: Path, name: str) -> None:
        self.log_path = workdir / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memory_bridge", "worker"],
                env=env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def kill(self) -> None:
        os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(5)
            raise


def pg_rows(url: str, sql: str, *args: object) -> list[Any]:
    """Rows of one query, on a connection of its own (asyncpg: the driver the code uses)."""

    async def run() -> list[Any]:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def test_four_workers_drain_2000_jobs_once_each_in_session_order(setup: Setup) -> None:
    s = setup
    send_turns(s.server.url, s.token)

    def rows(sql: str, *args: object) -> list[Any]:
        return pg_rows(s.pg_url, sql, *args)

    # serve --no-worker ran nothing: every job is waiting.
    assert [tuple(r) for r in rows("select status, count(*) from jobs group by status")] == [
        ("pending", SESSIONS * TURNS)
    ]

    def adds() -> int:
        return len(s.gateway.payloads("add"))

    workers = [Worker(s.env, s.workdir, f"worker-{i}") for i in range(WORKERS)]
    victim = workers[0]
    owner = f"%:{victim.pid}:%"
    try:
        poll(lambda: adds() >= RATE_FROM, f"{RATE_FROM} adds", timeout=600)
        t_from = time.monotonic()
        poll(lambda: adds() >= HOLD_AFTER_ADDS, f"{HOLD_AFTER_ADDS} adds", timeout=600)
        rate = (HOLD_AFTER_ADDS - RATE_FROM) / (time.monotonic() - t_from)
        s.gateway.fail("add", "timeout")  # adds now hang unanswered: every worker has one

        def victim_mid_add() -> bool:
            found = rows(
                "select count(*) from jobs where lease_owner like $1 and status = 'running'"
                " and step = 'add_in_flight'",
                owner,
            )
            return bool(found[0][0])

        poll(victim_mid_add, "the victim to have an add in flight", timeout=300)
        victim.kill()
        held = rows(
            "select id, step from jobs where lease_owner like $1 and status = 'running'", owner
        )
        victims = {r["id"] for r in held}
        in_flight = {r["id"] for r in held if r["step"] == "add_in_flight"}
        assert in_flight
        s.gateway.release()  # the survivors' hung adds are answered
        s.gateway.fail("add", None)

        def drained() -> bool:
            busy = rows("select count(*) from jobs where status in ('pending', 'running')")
            return bool(busy[0][0] == 0)

        poll(drained, "the queue to drain", timeout=900)
        for worker in workers[1:]:
            assert worker.terminate() == 0, worker.log_tail()
    finally:
        for worker in workers:
            if worker.proc.poll() is None:
                worker.kill()

    jobs = rows(
        "select j.id, j.status, j.step, j.attempts, e.payload from jobs j"
        " join memory_events e on e.event_id = j.event_id order by j.id"
    )
    events = rows("select count(*) from memory_events where type = 'session.appended'")

    # Every turn has its event and its one job; every job ended; each ran once, but the
    # victim's, claimed again after their lease expired.
    assert events[0][0] == len(jobs) == SESSIONS * TURNS
    statuses = Counter(j["status"] for j in jobs)
    assert statuses == {"done": len(jobs) - len(in_flight), "unknown": len(in_flight)}
    for job in jobs:
        found = (job["status"], job["step"], job["attempts"])
        if job["id"] in in_flight:
            assert found == ("unknown", "add_unknown", 2), job
        elif job["id"] in victims:
            assert found[0] == "done" and found[2] == 2, job
        else:
            assert found == ("done", "add_ok", 1), job

    # The Gateway: each turn added once (one in flight when its worker died: at most once).
    text_of = {j["id"]: json.loads(j["payload"])["query"] for j in jobs}
    unknown = {text_of[i] for i in in_flight}
    received = Counter(str(p["messages"][0]["content"]) for p in s.gateway.payloads("add"))
    assert max(received.values()) == 1, received.most_common(3)
    for job_id, said in text_of.items():
        assert received[said] in ((0, 1) if job_id in in_flight else (1,)), said

    # Per session: adds in turn order, each flushed before the next add.
    sequences: dict[str, list[str]] = defaultdict(list)
    for call in s.gateway.calls:
        if call.path == "/memories/add":
            sequences[call.json["session_id"]].append(call.json["messages"][0]["content"])
        elif call.path == "/memories/flush":
            sequences[call.json["session_id"]].append(FLUSH)
    assert len(sequences) == SESSIONS
    for session, calls in sequences.items():
        said = [c for c in calls if c != FLUSH]
        assert said == sorted(said, key=turn_index), (session, said)
        for one, following in itertools.pairwise([*calls, None]):
            if one != FLUSH and one not in unknown:
                assert following == FLUSH, (session, calls)
    assert_gateway_sessions(s.gateway)  # a flush repeated after the kill, at most
    print(
        f"\n{WORKERS} workers drained {len(jobs)} jobs at {rate:.0f} jobs/s "
        f"(adds {RATE_FROM}-{HOLD_AFTER_ADDS}); the victim held {len(victims)} job(s), "
        f"{len(in_flight)} mid-add, now unknown"
    )


FLUSH = "<flush>"


def turn_index(said: str) -> int:
    match = TURN_TEXT.match(said)
    assert match, said
    return int(match.group(2))
