"""SIGTERM drains a `memory-bridge worker` process: nothing is lost.

`memory-bridge serve --no-worker` serves (and only commits turns and their jobs); a separate
`memory-bridge worker` on the same SQLite database runs the jobs. The fake Gateway (served from
this process) holds each add unanswered for a while, so a job is in flight when the worker gets
SIGTERM:

- the add answers within `BACKGROUND_DRAIN_TIMEOUT`: the job finishes (add, then flush), and
  the worker exits 0;
- it does not: the worker cancels the job, gives its lease back at once (the job is `pending`
  again, no owner, no lease to wait out), and exits 0. The next worker claims it and, finding
  the add was in flight, ends it `unknown` without sending it again.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.gateway import FakeGateway
from tests.support.hybrid_memory_support import gateway_memory
from tests.support.jobs_support import poll, read_only
from tests.support.loopback import LoopbackServer
from tests.support.serve import (
    STOP_TIMEOUT,
    ServeProcess,
    init_data_dir,
    serve_env,
    start_bench_upstream,
)

pytestmark = pytest.mark.serial  # SIGTERM to worker processes within drain timeouts


@dataclass
class Setup:
    workdir: Path
    env: dict[str, str]
    server: ServeProcess
    gateway: FakeGateway
    gateway_url: str
    upstream_url: str
    admin: str

    @property
    def db(self) -> Path:
        return self.workdir / "data" / "memory_bridge.db"

    def token(self, name: str) -> str:
        reply = httpx.post(
            f"{self.server.url}/v1/admin/tokens",
            json={
                "name": name,
                "llm_base_url": self.upstream_url,
                "llm_api_key": "sk-bench",
                "memory": gateway_memory(self.gateway_url, timeoutSeconds=60),
            },
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=30,
            trust_env=False,
        )
        assert reply.status_code == 201, reply.text
        token: str = reply.json()["token"]
        return token

    def turn(self, token: str, text: str) -> None:
        reply = httpx.post(
            f"{self.server.url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": text}]},
            headers={"Authorization": f"Bearer {token}", "X-Session-Id": "s"},
            timeout=30,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text

    def job(self, text: str) -> dict[str, Any]:
        with read_only(self.db) as conn:
            conn.row_factory = sqlite3.Row
            row = conn.execute(
                "select j.* from jobs j join memory_events e on e.event_id = j.event_id"
                " where e.type = 'session.appended' and json_extract(e.payload, '$.query') = ?",
                (text,),
            ).fetchone()
        assert row is not None, text
        return dict(row)

    def adds(self, text: str) -> int:
        return sum(1 for p in self.gateway.payloads("add") if p["messages"][0]["content"] == text)

    def worker(self, drain_timeout: float, name: str) -> subprocess.Popen[bytes]:
        env = {**self.env, "BACKGROUND_DRAIN_TIMEOUT": str(drain_timeout), "LOG_LEVEL": "INFO"}
        with (self.workdir / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "memory_bridge", "worker"],
                env=env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    gateway = FakeGateway()
    with LoopbackServer(gateway.app) as gw, start_bench_upstream(tmp_path) as upstream:
        # Episodic memory off: these jobs are the Gateway's (at most once), one per turn.
        env = serve_env(
            tmp_path / "data",
            JOB_POLL_SECONDS="0.1",
            JOB_LEASE_SECONDS="120",
            EPISODIC_MEMORY="false",
        )
        admin = init_data_dir(env, tmp_path)
        argv = [sys.executable, "-m", "memory_bridge", "serve", "--no-worker"]
        with ServeProcess.start(env, tmp_path, name="serve", argv=argv) as server:
            try:
                yield Setup(tmp_path, env, server, gateway, gw.url, upstream.url, admin)
            finally:
                gateway.release()


def terminate(proc: subprocess.Popen[bytes]) -> int:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        raise


def test_sigterm_lets_the_job_in_flight_finish(setup: Setup) -> None:
    s = setup
    token = s.token("finish")
    s.gateway.hang_seconds = 1.0
    s.gateway.fail("add", "timeout")  # the add is answered (200) after a second
    text = "a turn in flight at SIGTERM"
    s.turn(token, text)
    assert s.job(text)["status"] == "pending"  # the serving process runs no job
    worker = s.worker(drain_timeout=30, name="worker-finish")
    try:
        poll(lambda: s.adds(text) == 1, "the add to be in flight")
        assert s.job(text)["step"] == "add_in_flight"
        assert terminate(worker) == 0, s.log("worker-finish")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    job = s.job(text)
    assert (job["status"], job["step"], job["attempts"]) == ("done", "add_ok", 1), job
    assert job["lease_owner"] is None
    assert s.adds(text) == 1
    assert [c.path for c in s.gateway.calls][-2:] == ["/memories/add", "/memories/flush"]
    assert s.gateway.violations == []
    assert "worker stopped after 1 job(s)" in s.log("worker-finish")


def test_sigterm_past_the_drain_timeout_gives_the_lease_back(setup: Setup) -> None:
    s = setup
    token = s.token("release")
    s.gateway.hang_seconds = 120
    s.gateway.fail("add", "timeout")  # the add hangs far longer than the drain timeout
    text = "a turn cut short at SIGTERM"
    s.turn(token, text)
    worker = s.worker(drain_timeout=0.5, name="worker-release")
    try:
        poll(lambda: s.adds(text) == 1, "the add to be in flight")
        assert terminate(worker) == 0, s.log("worker-release")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    job = s.job(text)
    # Back in the queue at once (JOB_LEASE_SECONDS is 120: nothing to wait out), its step kept.
    assert (job["status"], job["step"], job["lease_owner"]) == ("pending", "add_in_flight", None)
    assert job["lease_expires_at"] is None
    assert "released 1 job lease(s) at shutdown" in s.log("worker-release")

    # The next worker takes it and, the add having been in flight, never sends it again.
    s.gateway.fail("add", None)
    s.gateway.release()
    worker = s.worker(drain_timeout=5, name="worker-next")
    try:
        poll(lambda: s.job(text)["status"] == "unknown", "the job to end unknown")
        assert terminate(worker) == 0, s.log("worker-next")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    job = s.job(text)
    assert (job["step"], job["attempts"]) == ("add_unknown", 2), job
    assert s.adds(text) == 1
    assert "/memories/flush" not in [c.path for c in s.gateway.calls]
