"""`memory-bridge token ...` and `memory-bridge curated ...` as a newcomer runs them, in real
processes: init, register an LLM in one command, chat with the printed token through the
openai SDK; then the same commands against the running server with `--url`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.fakes.upstream import DEFAULT_REPLY, FakeUpstream
from tests.support.chat_helpers import closed_port_url
from tests.support.loopback import LoopbackServer
from tests.support.serve import ServeProcess, init_data_dir, serve_env

LLM_KEY = "sk-newcomer-upstream-key-0123456789"
SECRET = re.compile(r"^mb-[A-Za-z0-9_-]{20,}$", re.MULTILINE)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with LoopbackServer(fake.app) as server:
        yield fake, server.url


def _mb(
    env: dict[str, str], cwd: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_bridge", *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,  # a bound against a hang, not a measurement
        check=False,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def _secret(output: str) -> str:
    found = SECRET.findall(output)
    assert len(found) == 1, output
    return found[0]


def _ask(url: str, token: str, text: str) -> str | None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
    )
    return reply.choices[0].message.content


def test_init_then_token_create_then_a_chat_with_the_printed_token(
    tmp_path: Path, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, upstream_url = upstream
    env = serve_env(tmp_path / "data", TOKEN_CACHE_TTL="0")
    admin = init_data_dir(env, tmp_path)

    out = _ok(
        _mb(
            env,
            tmp_path,
            "token",
            "create",
            "--name",
            "my-agent",
            "--llm-base-url",
            f"{upstream_url}/v1",
            "--llm-api-key",
            LLM_KEY,
        )
    )
    token = _secret(out)
    assert out.startswith("Token 2 created (my-agent).")  # the admin token holds id 1
    assert "base_url http://127.0.0.1:8000/v1" in out
    assert LLM_KEY not in out

    with ServeProcess.start(env, tmp_path) as served:
        assert _ask(served.url, token, "My name is Ada.") == DEFAULT_REPLY
        # The upstream got the LLM key kept server-side, never the MemoryBridge token.
        assert fake.proxied_requests[-1].headers["authorization"] == f"Bearer {LLM_KEY}"

        # The same commands against the running server.
        remote = {**env, "MEMORY_BRIDGE_ADMIN_TOKEN": admin}
        listed = _ok(_mb(remote, tmp_path, "token", "list", "--url", served.url))
        assert re.search(r"^\s+2\s+my-agent\s+usable\s+http://127\.0\.0\.1:\d+/v1$", listed, re.M)
        shown = _ok(_mb(remote, tmp_path, "token", "show", "2", "--url", served.url))
        assert '"llm_api_key": "sk-...6789"' in shown and LLM_KEY not in shown

        notes = tmp_path / "MEMORY.md"
        notes.write_text("The user's cat is called Miso.\n")
        _ok(_mb(remote, tmp_path, "curated", "put", "2", "memory", str(notes), "--url", served.url))
        assert _ask(served.url, token, "Cat's name?") == DEFAULT_REPLY
        assert "Miso" in fake.proxied_requests[-1].json["messages"][0]["content"]
        got = _ok(_mb(env, tmp_path, "curated", "get", "2", "memory"))  # the local database
        assert got == "The user's cat is called Miso.\n"
        stdin_put = _mb(env, tmp_path, "curated", "put", "2", "user", "--user", "ada", stdin="Ada.")
        assert "USER.md of end user 'ada' of token 2 replaced (4 bytes)." in _ok(stdin_put)

        # Rotation (local): the printed secret works at once, the old one no more.
        rotated = _secret(_ok(_mb(env, tmp_path, "token", "rotate", "2")))
        assert _ask(served.url, rotated, "still me?") == DEFAULT_REPLY
        with pytest.raises(openai.AuthenticationError):
            _ask(served.url, token, "old secret?")

        # Deletion through the server.
        _ok(_mb(remote, tmp_path, "token", "delete", "2", "--url", served.url))
        with pytest.raises(openai.AuthenticationError):
            _ask(served.url, rotated, "gone?")
        assert "No service tokens yet" in _ok(_mb(env, tmp_path, "token", "list"))


def test_a_config_that_cannot_work_is_refused_with_its_reason(
    tmp_path: Path, upstream: tuple[FakeUpstream, str]
) -> None:
    _, upstream_url = upstream
    env = serve_env(tmp_path / "data")
    init_data_dir(env, tmp_path)
    memory = json.dumps(
        {
            "memory_llm_provider": "openai",
            "memory_llm_base_url": upstream_url,
            "embed_provider": "openai",
            "embed_base_url": closed_port_url(),
            "embed_dims": 8,
        }
    )
    args = ["token", "create", "--name", "m", "--llm-base-url", upstream_url, "--config", memory]
    refused = _mb(env, tmp_path, *args)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: embed_base_url: the embedder could not be reached")
    assert "(embedder_unreachable)" in refused.stderr
    assert "No service tokens yet" in _ok(_mb(env, tmp_path, "token", "list"))

    saved = _ok(_mb(env, tmp_path, *args, "--no-validate", "--json"))
    assert '"embed_base_url": "http://127.0.0.1:' in saved and '"token": "mb-' in saved

    missing = _mb(env, tmp_path, "token", "show", "99")
    assert (missing.returncode, missing.stderr) == (1, "error: No token with id 99.\n")


def test_without_init_or_an_admin_token_the_commands_say_what_to_do(tmp_path: Path) -> None:
    env = serve_env(tmp_path / "data")
    env.pop("MEMORY_BRIDGE_ADMIN_TOKEN", None)
    fresh = _mb(env, tmp_path, "token", "list")
    assert fresh.returncode == 1 and "run `memory-bridge init` first" in fresh.stderr
    remote = _mb(env, tmp_path, "token", "list", "--url", "http://127.0.0.1:9")
    assert remote.returncode == 1 and "--url needs the admin token" in remote.stderr
    env["MEMORY_BRIDGE_ADMIN_TOKEN"] = "mb-admin-x"
    down = _mb(env, tmp_path, "token", "list", "--url", closed_port_url())
    assert down.returncode == 1 and "could not reach" in down.stderr
