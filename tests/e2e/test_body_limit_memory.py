"""A body of ten times the limit is refused with 413 while it streams in, without the serving
process's memory growing by anything like the body's size (a real `memory-bridge serve`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.serve import ServeProcess, init_data_dir, serve_env

pytestmark = pytest.mark.serial  # reads the serving process's RSS

LIMIT = 4 * 1024 * 1024
BODY = 10 * LIMIT


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_an_oversized_body_is_refused_before_it_is_held(tmp_path: Path) -> None:
    env = serve_env(tmp_path / "data", MAX_REQUEST_BYTES=str(LIMIT))
    admin = init_data_dir(env, tmp_path)
    with ServeProcess.start(env, tmp_path) as served:
        created = httpx.post(
            f"{served.url}/v1/admin/tokens",
            json={"name": "t", "llm_base_url": "http://127.0.0.1:9"},
            headers={"Authorization": f"Bearer {admin}"},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        token = created.json()["token"]
        # Warm the chat path up so its one-off allocations are not counted.
        httpx.post(
            f"{served.url}/v1/chat/completions",
            content=b"{}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        before = _rss_bytes(served.pid)

        def chunks() -> Iterator[bytes]:
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            piece = b"x" * (256 * 1024)
            for _ in range(BODY // len(piece)):
                yield piece
            yield b'"}]}'

        try:
            reply = httpx.post(
                f"{served.url}/v1/chat/completions",
                content=chunks(),
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            status = reply.status_code
        except httpx.HTTPError:
            status = None  # the server may close the connection while we are still sending
        after = _rss_bytes(served.pid)
        assert status in (413, None)
        growth = after - before
        assert growth < LIMIT * 2, f"RSS grew by {growth} bytes for a {BODY}-byte body"
        # The server still serves, and the refusal was a 413 of ours (its log says nothing
        # of an error).
        assert httpx.get(f"{served.url}/health", timeout=30).status_code == 200
        assert "Traceback" not in served.log_tail(200)
