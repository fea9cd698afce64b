"""A burst against one real `memory-bridge serve`: every request served, every turn stored
once, and no file descriptor left behind.

2,000 chat completions at concurrency 100 (every other one streamed) across 50 sessions of
one token with session history on, against the benchmark's fast fake upstream (its own
process). Every request's user text is unique, so a turn stored twice, or not at all, or
under the wrong session, is seen. The stored assistant text must be the reply the client
received (for a stream: its deltas joined).

Open file descriptors of the proxy process are read from /proc/<pid>/fd, each classified
(a client connection, an upstream connection, the SQLite files, anything else), before the
burst (after a warm-up burst at the same concurrency, so the pools the proxy keeps on purpose
exist already) and after it, once the client has closed its connections:

- no client connection is left;
- upstream connections are the idle keep-alive pool: at most one per request that can be in
  flight at once (`CONCURRENCY`), and all gone once the upstream itself has gone;
- everything else (database files, pipes, the listening socket...) is back to its level
  within `FD_SLACK`: the SQLite pool opens connections on demand (up to 20, each the
  database file and its -wal), so a burst may leave one or two more than the warm-up did. A
  leak of one descriptor per hundred requests (20) is far above it.

Nothing here depends on timing: waits are bounded polls, never measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from tests.support.serve import (
    ServeProcess,
    init_data_dir,
    serve_env,
    start_bench_upstream,
)

pytestmark = pytest.mark.serial  # 2,000 requests at concurrency 100; counts descriptors

T = TypeVar("T")

REQUESTS = 2000
CONCURRENCY = 100
SESSIONS = 50
WARM_UP = 200
FD_SLACK = 6
WAIT = 60.0  # bound on every poll (stored turns, descriptors), never a measured duration
MODEL = "bench-burst"


@dataclass(frozen=True)
class Outcome:
    index: int
    session: str
    text: str
    streamed: bool
    status: int
    reply: str | None  # the assistant text the client received; None if malformed
    error: str = ""


@dataclass
class Served:
    proxy: ServeProcess
    upstream: ServeProcess
    admin: str
    data: Path
    token_id: int
    token: str


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    data = tmp_path / "data"
    env = serve_env(data)
    admin = init_data_dir(env, tmp_path)
    with (
        start_bench_upstream(tmp_path) as upstream,
        ServeProcess.start(env, tmp_path, name="memory-bridge") as proxy,
    ):
        reply = httpx.post(
            f"{proxy.url}/v1/admin/tokens",
            json={"name": "burst", "llm_base_url": upstream.url, "llm_api_key": "sk-burst"},
            headers={"Authorization": f"Bearer {admin}"},
            timeout=30,
            trust_env=False,
        )
        assert reply.status_code == 201, reply.text
        created = reply.json()
        yield Served(proxy, upstream, admin, data, created["id"], created["token"])
        assert proxy.proc.poll() is None, proxy.log_tail()


def _poll(check: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + WAIT
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# ---- the load ------------------------------------------------------------------------------

_parsed_streams: dict[bytes, str | None] = {}


def _stream_text(body: bytes) -> str | None:
    """The content deltas of an SSE body joined; None unless it is well formed and complete
    (a finish_reason, then `[DONE]`). Identical bodies are parsed once."""
    if body in _parsed_streams:
        return _parsed_streams[body]
    parts: list[str] = []
    finished = done = False
    for event in body.decode().split("\n\n"):
        if not event:
            continue
        if not event.startswith("data: ") or done:
            _parsed_streams[body] = None
            return None
        data = event.removeprefix("data: ")
        if data == "[DONE]":
            done = True
            continue
        choices = json.loads(data).get("choices")
        if not choices:  # an in-band error event: the stream broke
            _parsed_streams[body] = None
            return None
        choice = choices[0]
        parts.append(choice["delta"].get("content") or "")
        finished = finished or choice.get("finish_reason") is not None
    text = "".join(parts) if finished and done else None
    _parsed_streams[body] = text
    return text


async def _one(client: httpx.AsyncClient, token: str, index: int, tag: str) -> Outcome:
    session = f"{tag}-{index % SESSIONS}"
    text = f"{tag} request {index}: {uuid.uuid4()}"
    streamed = index % 2 == 0
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": streamed}
    headers = {"Authorization": f"Bearer {token}", "X-Session-Id": session}
    outcome = Outcome(index, session, text, streamed, 0, None)
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            raw = await response.aread()
    except httpx.HTTPError as exc:
        return replace(outcome, error=repr(exc))
    reply: str | None = None
    if response.status_code == 200:
        try:
            reply = (
                _stream_text(raw)
                if streamed
                else json.loads(raw)["choices"][0]["message"]["content"]
            )
        except (ValueError, LookupError, AttributeError):
            reply = None  # malformed: counted as a failure
    error = "" if response.status_code == 200 else raw[:300].decode(errors="replace")
    return replace(outcome, status=response.status_code, reply=reply, error=error)


async def _burst(url: str, token: str, count: int, tag: str) -> list[Outcome]:
    """`count` requests, `CONCURRENCY` in flight at any time, one connection per worker."""
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    indexes = iter(range(count))
    outcomes: list[Outcome] = []
    async with httpx.AsyncClient(
        base_url=url, limits=limits, timeout=WAIT, trust_env=False
    ) as client:

        async def worker() -> None:
            for index in indexes:
                outcomes.append(await _one(client, token, index, tag))

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return outcomes


# ---- what the proxy holds ------------------------------------------------------------------


def _stored(data: Path, token_id: int, prefix: str) -> dict[str, list[tuple[str, str]]]:
    """Stored (role, text) per session of `prefix`, in storage order (read-only access)."""
    uri = f"file:{data / 'memory_bridge.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as db:
        rows = db.execute(
            "SELECT session_id, role, body FROM messages WHERE token_id = ? AND session_id LIKE ?"
            " ORDER BY id",
            (token_id, f"{prefix}-%"),
        ).fetchall()
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for session, role, body in rows:
        out[session].append((role, json.loads(body)["content"]))
    return out


def _sockets(pid: int) -> dict[str, tuple[int, int, str]]:
    """`socket:[inode]` → (local port, remote port, TCP state) for the process's TCP sockets,
    and (0, 0, "unix") for its Unix ones (the event loop's self-pipe...)."""
    out: dict[str, tuple[int, int, str]] = {}
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            out[f"socket:[{inode}]"] = (
                int(local.rsplit(":", 1)[1], 16),
                int(remote.rsplit(":", 1)[1], 16),
                state,
            )
    for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        out[f"socket:[{line.split()[6]}]"] = (0, 0, "unix")
    return out


@dataclass(frozen=True)
class Fds:
    total: int
    clients: int  # connections accepted on the proxy's port
    upstream: int  # connections to the fake upstream
    database: int  # the SQLite database and its -wal/-shm files
    other: int
    closing: int  # sockets gone from the kernel's tables while we looked: not settled yet

    def __str__(self) -> str:
        return (
            f"{self.total} open (clients {self.clients}, upstream {self.upstream}, "
            f"database {self.database}, other {self.other}, closing {self.closing})"
        )


def _fds(served: Served) -> Fds:
    links = served.proxy.open_fds()
    sockets = _sockets(served.proxy.pid)
    proxy_port = int(served.proxy.url.rsplit(":", 1)[1])
    upstream_port = int(served.upstream.url.rsplit(":", 1)[1])
    database = str(served.data.resolve() / "memory_bridge.db")
    kinds: Counter[str] = Counter()
    for link in links:
        local, remote, state = sockets.get(link, (0, 0, ""))
        if link.startswith("socket:") and not state:
            kinds["closing"] += 1
        elif local == proxy_port and state != "0A":  # 0A: LISTEN
            kinds["clients"] += 1
        elif remote == upstream_port:
            kinds["upstream"] += 1
        elif link.startswith(database):
            kinds["database"] += 1
        else:
            kinds["other"] += 1
    return Fds(
        len(links),
        kinds["clients"],
        kinds["upstream"],
        kinds["database"],
        kinds["other"],
        kinds["closing"],
    )


def _settled(served: Served, *, upstream_gone: bool = False) -> Fds:
    """The descriptors once no client connection is left (and, with `upstream_gone`, no
    upstream one either)."""

    def check() -> Fds | None:
        fds = _fds(served)
        if fds.clients or fds.closing or (upstream_gone and fds.upstream):
            return None
        return fds

    try:
        return _poll(check, "the proxy's connections to close")
    except AssertionError:
        raise AssertionError(f"connections left open: {_fds(served)}") from None


# ---- the test ------------------------------------------------------------------------------


def test_burst_every_request_served_every_turn_stored_once_no_descriptor_leaked(
    served: Served,
) -> None:
    url, token = served.proxy.url, served.token

    warm = asyncio.run(_burst(url, token, WARM_UP, "warm"))
    assert all(o.status == 200 and o.reply for o in warm), [o for o in warm if o.status != 200]
    before = _settled(served)

    outcomes = asyncio.run(_burst(url, token, REQUESTS, "burst"))

    # Every request served: no 5xx, no error status, no broken body.
    assert len(outcomes) == REQUESTS
    failed = [o for o in outcomes if o.status != 200 or not o.reply]
    assert not failed, (
        f"{len(failed)} of {REQUESTS} failed, e.g. {failed[:3]}\n"
        f"proxy log:\n{served.proxy.log_tail()}"
    )
    assert sum(o.streamed for o in outcomes) == REQUESTS // 2

    # Every turn stored once: per session, exactly its requests, each as one user message
    # followed by the assistant reply that request's client received.
    expected: dict[str, dict[str, Outcome]] = defaultdict(dict)
    for o in outcomes:
        expected[o.session][o.text] = o
    assert len(expected) == SESSIONS

    def all_stored() -> bool | None:
        stored = _stored(served.data, served.token_id, "burst")
        return True if sum(len(rows) for rows in stored.values()) >= 2 * REQUESTS else None

    _poll(all_stored, "every turn to be stored")
    after = _settled(served)
    stored = _stored(served.data, served.token_id, "burst")  # read again: nothing came late
    assert sum(len(rows) for rows in stored.values()) == 2 * REQUESTS
    assert set(stored) == set(expected)
    for session, rows in stored.items():
        requests = expected[session]
        assert len(rows) == 2 * len(requests), session
        assert [role for role, _ in rows[0::2]] == ["user"] * len(requests), session
        assert [role for role, _ in rows[1::2]] == ["assistant"] * len(requests), session
        users = [text for _, text in rows[0::2]]
        assert sorted(users) == sorted(requests), session  # each exactly once, nothing else
        for (_, user), (_, assistant) in zip(rows[0::2], rows[1::2], strict=True):
            assert assistant == requests[user].reply, (session, user)

    # Descriptors (see the module docstring).
    report = f"before the burst: {before}; after: {after}"
    assert after.upstream <= CONCURRENCY, report
    assert after.total - after.upstream <= before.total - before.upstream + FD_SLACK, report
    served.upstream.stop()
    gone = _settled(served, upstream_gone=True)
    assert gone.total <= before.total - before.upstream + FD_SLACK, f"{report}; then {gone}"
    print(f"\nfds {report}; upstream gone: {gone}")
