"""`memory-bridge export` and `memory-bridge import` in real processes, on the local database
and against a running server (`--url`): a conversation moved from one token to another is the
history the other token's next request gets."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.loopback import LoopbackServer
from tests.support.serve import ServeProcess, init_data_dir, serve_env

LLM_KEY = "sk-lifecycle-upstream-key-0123456789"


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with LoopbackServer(fake.app) as server:
        yield fake, server.url


def _mb(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_bridge", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,  # a bound against a hang, not a measurement
        check=False,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout + done.stderr


def _token(env: dict[str, str], cwd: Path, name: str, upstream_url: str) -> str:
    out = _ok(
        _mb(
            env,
            cwd,
            "token",
            "create",
            "--name",
            name,
            "--llm-base-url",
            f"{upstream_url}/v1",
            "--llm-api-key",
            LLM_KEY,
        )
    )
    found = re.findall(r"^mb-[A-Za-z0-9_-]{20,}$", out, re.MULTILINE)
    assert len(found) == 1, out
    return str(found[0])


def _say(url: str, token: str, text: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": "trip"},
    )


def test_export_and_import_from_the_command_line(
    tmp_path: Path, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, upstream_url = upstream
    env = serve_env(tmp_path / "data", TOKEN_CACHE_TTL="0", EPISODIC_DEFAULT_EMBEDDER="none")
    admin = init_data_dir(env, tmp_path)
    first = _token(env, tmp_path, "first", upstream_url)
    second = _token(env, tmp_path, "second", upstream_url)
    exported = tmp_path / "first.ndjson"

    with ServeProcess.start(env, tmp_path) as served:
        _say(served.url, first, "Mail me at ada@example.com")
        _say(served.url, first, "I live in Oslo")

        # Locally, beside the running server: the raw history, into an owner-only file.
        out = _ok(
            _mb(
                env,
                tmp_path,
                "export",
                "--token",
                "2",
                "--include",
                "sessions",
                "-o",
                str(exported),
            )
        )
        assert "3 event(s) written" in out  # the session started, and its two turns
        assert stat.S_IMODE(exported.stat().st_mode) == 0o600
        lines = [json.loads(line) for line in exported.read_text().splitlines()]
        assert lines[0]["classes"] == ["sessions"] and lines[0]["events"] == len(lines) - 1
        assert LLM_KEY not in exported.read_text() and first not in exported.read_text()

        # Through the server, then locally again: the second import skips everything.
        remote = {**env, "MEMORY_BRIDGE_ADMIN_TOKEN": admin}
        imported = _ok(
            _mb(remote, tmp_path, "import", str(exported), "--token", "3", "--url", served.url)
        )
        assert f"{len(lines) - 1} event(s) imported, 0 skipped" in imported
        again = _ok(_mb(env, tmp_path, "import", str(exported), "--token", "3"))
        assert f"0 event(s) imported, {len(lines) - 1} skipped" in again

        # The second token's next request in that session carries the moved history.
        _say(served.url, second, "Where do I live?")
        forwarded = json.dumps(fake.proxied_requests[-1].json["messages"])
        assert "I live in Oslo" in forwarded

        masked = _ok(
            _mb(
                remote,
                tmp_path,
                "export",
                "--token",
                "3",
                "--include",
                "sessions",
                "--mask",
                "--url",
                served.url,
            )
        )
        assert "ada@example.com" not in masked and "[email]" in masked

    missing = _mb(env, tmp_path, "export", "--token", "99", "-o", str(tmp_path / "none.ndjson"))
    assert missing.returncode == 1 and "No token with id 99" in missing.stderr
    assert not (tmp_path / "none.ndjson").exists()
