"""A turn that cannot be stored is never silent: `memory-bridge serve` with its data directory
on a small tmpfs that fills up.

The data directory is a 3 MB tmpfs mounted for the test (we run as root; without the right to
mount, the test is skipped: a full filesystem is the point, not a simulated error). After a
first turn is stored, a filler file takes every free byte; turns with large messages then go
on (every other one streamed) until the database refuses some. SQLite may still take a few
turns in space its files already hold (the write-ahead log is reused), so the test never
assumes which turn fails; it checks each turn against the database instead:

- every response is 200 with the upstream's answer; a turn the database refused says so
  (`X-MemoryBridge-Stored: false`, or a stream's `: memorybridge stored=false` comment before
  its end), and a turn without that mark is stored: none is lost silently;
- a refused turn left nothing (no event, no history);
- `/health` is 503 `{"status": "degraded", "storage": "failing"}` while failing, and 200 again
  once space is freed and a turn is stored;
- `/metrics` (admin token) counts `memorybridge_turns_not_stored_total`: exactly the refusals.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest

from tests.support.jobs_support import read_only
from tests.support.serve import ServeProcess, init_data_dir, serve_env, start_bench_upstream

TMPFS_SIZE = "3m"
BIG = 24 * 1024  # bytes of user text per turn: the database grows fast
MAX_TURNS = 60  # a bound on the turns sent while full, never reached by a working build
NOT_STORED = b": memorybridge stored=false"


@dataclass
class Sent:
    text: str
    streamed: bool
    marked: bool  # the response said "not stored"
    body: bytes = b""  # a stream's bytes


@contextlib.contextmanager
def small_tmpfs(path: Path) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(directory: Path) -> Path:
    """A file that takes every free byte of the filesystem."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (65536, 4096, 512, 1):  # down to the last byte
            assert _write_until_error(out, size) == errno.ENOSPC
    return filler


def _write_until_error(out: BinaryIO, size: int) -> int | None:
    try:
        while True:
            out.write(b"\0" * size)
    except OSError as exc:
        return exc.errno


class Client:
    def __init__(self, url: str, token: str, admin: str) -> None:
        self.url = url
        self.token = token
        self.admin = admin

    def turn(self, text: str, streamed: bool) -> Sent:
        body = {
            "model": "m",
            "stream": streamed,
            "messages": [{"role": "user", "content": text}],
        }
        headers = {"Authorization": f"Bearer {self.token}", "X-Session-Id": "full"}
        url = f"{self.url}/v1/chat/completions"
        if streamed:
            with httpx.stream(
                "POST", url, json=body, headers=headers, timeout=30, trust_env=False
            ) as reply:
                raw = reply.read()
            assert reply.status_code == 200, raw
            assert "x-memorybridge-stored" not in reply.headers  # headers left before the end
            assert raw.endswith(b"data: [DONE]\n\n"), raw[-200:]
            if NOT_STORED in raw:  # in-band, between two events, before the end
                at = raw.index(NOT_STORED)
                assert raw[at - 2 : at] == b"\n\n" and at < raw.rindex(b"data: [DONE]"), raw
            return Sent(text, True, NOT_STORED in raw, raw)
        reply = httpx.post(url, json=body, headers=headers, timeout=30, trust_env=False)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        stored = reply.headers.get("x-memorybridge-stored")
        assert stored in (None, "false"), stored
        return Sent(text, False, stored == "false")

    def health(self) -> httpx.Response:
        return httpx.get(f"{self.url}/health", timeout=10, trust_env=False)

    def not_stored_total(self) -> float:
        reply = httpx.get(
            f"{self.url}/metrics",
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=10,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        found = re.search(r"^memorybridge_turns_not_stored_total (\S+)$", reply.text, re.M)
        assert found, reply.text
        return float(found.group(1))


def stored_queries(db: Path) -> list[str]:
    with read_only(db) as conn:
        rows = conn.execute(
            "select payload from memory_events where type = 'session.appended' order by id"
        ).fetchall()
    return [json.loads(r[0])["query"] for r in rows]


def history_texts(db: Path) -> list[str]:
    with read_only(db) as conn:
        rows = conn.execute("select body from messages where role = 'user' order by id")
        return [str(json.loads(r[0])["content"]) for r in rows]


def test_turns_the_database_refuses_are_marked_counted_and_reported(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "data") as data, start_bench_upstream(tmp_path) as upstream:
        env = serve_env(data)
        db = data / "memory_bridge.db"
        admin = init_data_dir(env, tmp_path)
        with ServeProcess.start(env, tmp_path) as server:
            created = httpx.post(
                f"{server.url}/v1/admin/tokens",
                json={"name": "full", "llm_base_url": upstream.url, "llm_api_key": "sk-x"},
                headers={"Authorization": f"Bearer {admin}"},
                timeout=30,
                trust_env=False,
            )
            assert created.status_code == 201, created.text
            client = Client(server.url, created.json()["token"], admin)
            assert client.not_stored_total() == 0

            sent = [client.turn(f"before the disk fills ({how})", how) for how in (False, True)]
            assert not any(s.marked for s in sent)
            assert client.health().json() == {"status": "ok"}

            filler = fill(data)
            streamed = False
            while len(sent) < MAX_TURNS and not (
                any(s.marked and s.streamed for s in sent)
                and any(s.marked and not s.streamed for s in sent)
            ):
                text = f"turn {len(sent)} {uuid.uuid4().hex} " + "x" * BIG
                sent.append(client.turn(text, streamed))
                streamed = not streamed
                if sent[-1].marked:
                    health = client.health()
                    assert health.status_code == 503, health.text
                    assert health.json()["status"] == "degraded"
                    assert health.json()["storage"] == "failing"
            refused = [s for s in sent if s.marked]
            lost = {s.text for s in sent if not s.marked} - set(stored_queries(db))
            assert not lost, f"{len(lost)} turn(s) lost without a word"
            assert {s.streamed for s in refused} == {False, True}, "the full disk refused none"
            # The comment is all a refused stream adds: the upstream's bytes are intact.
            (upstream_bytes,) = {s.body for s in sent if s.streamed and not s.marked}
            for s in refused:
                if s.streamed:
                    assert s.body.replace(NOT_STORED + b"\n\n", b"") == upstream_bytes
            assert client.not_stored_total() == len(refused)

            # Space again: the next turn is stored, and the storage is healthy once more.
            filler.unlink()
            after = client.turn("after space was freed", streamed=False)
            assert not after.marked
            sent.append(after)
            assert client.health().status_code == 200
            assert client.health().json() == {"status": "ok"}
            assert client.not_stored_total() == len(refused)

        # Never silent: every unmarked turn is stored (once), no marked one left anything.
        stored = stored_queries(db)
        history = history_texts(db)
        assert len(stored) == len(set(stored))
        assert set(stored) == {s.text for s in sent if not s.marked}
        assert set(history) == set(stored)
        print(
            f"\n{len(sent)} turns: {len(sent) - len(refused)} stored, {len(refused)} refused "
            f"and marked ({sum(s.streamed for s in refused)} streamed)"
        )
