"""Every `memory-bridge token|curated` command and its errors, in process (typer's runner), on
the local database and through a running proxy (`--url`). tests/e2e/test_cli_admin.py runs the
newcomer's path in real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from memory_bridge.cli.main import SENTINEL_DONE, cli
from tests.fakes.upstream import FakeUpstream
from tests.support.chat_helpers import closed_port_url
from tests.support.longterm_support import memory_fields
from tests.support.proxy import UPSTREAM_KEY, Proxy


@pytest.fixture
def env(proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    """The proxy's data directory as the CLI's, initialised as `memory-bridge init` leaves it."""
    data = proxy.settings.memory_bridge_data_dir
    (data / SENTINEL_DONE).touch()
    monkeypatch.setenv("MEMORY_BRIDGE_DATA_DIR", str(data))
    monkeypatch.setenv("DATABASE_URL", "")
    monkeypatch.setenv("TOKEN_CACHE_TTL", "0")
    for name in ("MEMORY_BRIDGE_ADMIN_TOKEN", "MEMORY_BRIDGE_URL", "MEMORY_BRIDGE_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return proxy


def _mb(*args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin)


def _ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def _error(result: Result) -> str:
    assert result.exit_code == 1, result.output
    return result.output


def _remote(proxy: Proxy, token_file: Path) -> list[str]:
    token_file.write_text(proxy.admin_token + "\n")
    return ["--url", proxy.url, "--admin-token-file", str(token_file)]


@pytest.mark.parametrize("where", ["local", "remote"])
def test_the_token_commands(env: Proxy, upstream: FakeUpstream, tmp_path: Path, where: str) -> None:
    url = _remote(env, tmp_path / "admin") if where == "remote" else []
    assert "No service tokens yet" in _ok(_mb("token", "list", *url))
    created = json.loads(
        _ok(
            _mb(
                "token",
                "create",
                "--name",
                "bot",
                "--llm-base-url",
                env.upstream_url,
                "--llm-api-key",
                UPSTREAM_KEY,
                "--config",
                '{"session_window_size": 7}',
                "--json",
                *url,
            )
        )
    )
    assert (created["id"], created["config"]["session_window_size"]) == (2, 7)
    assert created["token"].startswith("mb-") and UPSTREAM_KEY not in json.dumps(created)
    assert env.chat(created["token"], model="m", messages=[{"role": "user", "content": "hi"}])

    listed = _ok(_mb("token", "list", *url))
    assert "bot" in listed and "usable" in listed
    assert json.loads(_ok(_mb("token", "list", "--json", *url)))[0]["id"] == 2
    shown = json.loads(_ok(_mb("token", "show", "2", *url)))
    assert shown["config"]["llm_api_key"] == "sk-...6789"
    rotated = _ok(_mb("token", "rotate", "2", *url)).splitlines()[-1]
    assert rotated.startswith("mb-") and rotated != created["token"]
    assert "Token 2 deleted and purged." in _ok(_mb("token", "delete", "2", "--purge", *url))
    assert "No token with id 2." in _error(_mb("token", "show", "2", *url))
    assert "No token with id 2." in _error(_mb("token", "rotate", "2", *url))
    assert "No token with id 2." in _error(_mb("token", "delete", "2", *url))


@pytest.mark.parametrize("where", ["local", "remote"])
def test_the_curated_commands(
    env: Proxy, upstream: FakeUpstream, tmp_path: Path, where: str
) -> None:
    url = _remote(env, tmp_path / "admin") if where == "remote" else []
    token_id, _ = env.create_token()
    doc = tmp_path / "MEMORY.md"
    doc.write_text("# Facts\nThe sky is green.\n")
    assert "MEMORY.md of token 2 replaced" in _ok(
        _mb("curated", "put", "2", "memory", str(doc), *url)
    )
    assert _ok(_mb("curated", "get", "2", "memory", *url)) == "# Facts\nThe sky is green.\n"
    put = _mb("curated", "put", "2", "user", "--user", "ann", *url, stdin="Ann.")
    assert "USER.md of end user 'ann' of token 2 replaced (4 bytes)." in _ok(put)
    assert _ok(_mb("curated", "get", "2", "user", "--user", "ann", *url)) == "Ann.\n"
    assert _ok(_mb("curated", "get", "2", "user", *url)) == ""
    reply = env.admin("GET", f"/tokens/{token_id}/curated/user", params={"user": "ann"})
    assert reply.text == "Ann."

    deleted = _mb("curated", "delete", "2", "user", "--user", "ann", *url)
    assert "USER.md of end user 'ann' of token 2 deleted." in _ok(deleted)
    assert "no such document" in _error(
        _mb("curated", "delete", "2", "user", "--user", "ann", *url)
    )
    assert "token-wide" in _error(_mb("curated", "get", "2", "memory", "--user", "x", *url))
    assert "No token with id 9." in _error(_mb("curated", "get", "9", "memory", *url))
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"\xff\xfe")
    assert "must be UTF-8" in _error(_mb("curated", "put", "2", "memory", str(bad), *url))
    nul = _mb("curated", "put", "2", "memory", *url, stdin="a\x00b")
    assert "NUL" in _error(nul)
    big = _mb("curated", "put", "2", "memory", *url, stdin="x" * 70_000)
    assert "limited to" in _error(big)


def test_local_curated_kinds_are_checked(env: Proxy, upstream: FakeUpstream) -> None:
    env.create_token()
    assert "`memory` or `user`" in _error(_mb("curated", "get", "2", "notes"))


def test_token_create_checks_the_config_like_the_api(
    env: Proxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    base = ["token", "create", "--name", "m", "--llm-base-url", env.upstream_url]
    fields = memory_fields(env.upstream_url, embed_base_url=closed_port_url())
    config = tmp_path / "config.json"
    config.write_text(json.dumps(fields))
    refused = _error(_mb(*base, "--config", f"@{config}"))
    assert "embed_base_url: the embedder could not be reached" in refused
    remote = _remote(env, tmp_path / "admin")
    assert "(embedder_unreachable)" in _error(_mb(*base, "--config", f"@{config}", *remote))
    saved = _ok(_mb(*base, "--config", f"@{config}", "--no-validate", *remote))
    assert saved.startswith("Token 2 created (m).")
    assert f"base_url {env.url}/v1" in saved
    local = _ok(_mb(*base, "--config", f"@{config}", "--no-validate"))
    assert local.startswith("Token 3 created (m).")

    assert "not valid JSON" in _error(_mb(*base, "--config", "{nope"))
    assert "must be a JSON object" in _error(_mb(*base, "--config", "[1]"))
    assert "session_window_size" in _error(_mb(*base, "--config", '{"session_window_size": 0}'))


def test_where_the_admin_token_comes_from(
    env: Proxy, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "--url needs the admin token" in _error(_mb("token", "list", "--url", env.url))
    monkeypatch.setenv("MEMORY_BRIDGE_ADMIN_TOKEN", "mb-admin-wrong")
    assert "Unknown or unusable token." in _error(_mb("token", "list", "--url", env.url))
    monkeypatch.setenv("MEMORY_BRIDGE_ADMIN_TOKEN", env.admin_token)
    assert "No service tokens yet" in _ok(_mb("token", "list", "--url", env.url))
    # scripts/run.sh keeps it in the data directory.
    monkeypatch.delenv("MEMORY_BRIDGE_ADMIN_TOKEN")
    (env.settings.memory_bridge_data_dir / "admin-token").write_text(env.admin_token + "\n")
    assert "No service tokens yet" in _ok(_mb("token", "list", "--url", env.url))
    assert "could not reach" in _error(_mb("token", "list", "--url", closed_port_url()))
    # Another server's error answer is passed on as it says it.
    assert "Unknown request URL" in _error(_mb("token", "list", "--url", env.upstream_url))


def test_an_uninitialised_data_dir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_BRIDGE_DATA_DIR", str(tmp_path / "none"))
    assert "run `memory-bridge init` first" in _error(_mb("token", "list"))
