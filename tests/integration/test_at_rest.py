"""Secrets and data at rest, against the real app on real SQLite files: owner-only files,
provider keys encrypted with a key kept outside the database (and rotated), rows from older
versions encrypted on the next start, and URLs carrying credentials refused at save time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet, InvalidToken
from typer.testing import CliRunner

from memory_bridge.cli.main import cli, initialise
from memory_bridge.server.app import create_app
from memory_bridge.tenancy.encryption import SEALED_PREFIX, read_key_file
from memory_bridge.tenancy.private_files import write_private
from memory_bridge.tenancy.secrets import digest
from tests.fakes.upstream import FakeUpstream
from tests.support.hybrid_memory_support import Served
from tests.support.longterm_support import memory_fields
from tests.support.loopback import LoopbackServer
from tests.support.proxy import REPO, Proxy, make_settings

LLM_KEY = "sk-AtRest-llm-7f3c9a1e5b2d4680"
MEMORY_LLM_KEY = "sk-AtRest-memllm-0a9b8c7d6e5f4321"
EMBED_KEY = "sk-AtRest-embed-13579bdf2468ace0"
BODY_KEY = "sk-AtRest-body-fedcba9876543210"
USER_KEY = "uk_AtRest_gateway_0123456789abcd"
KEYS = (LLM_KEY, MEMORY_LLM_KEY, EMBED_KEY, BODY_KEY, USER_KEY)
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _db(proxy: Proxy) -> Path:
    return proxy.settings.memory_bridge_data_dir / "memory_bridge.db"


def _db_files(proxy: Proxy) -> list[Path]:
    db = _db(proxy)
    return [p for p in (db, *(db.with_name(db.name + s) for s in ("-wal", "-shm"))) if p.exists()]


def _raw_config(proxy: Proxy, token_id: int) -> Any:
    with sqlite3.connect(_db(proxy)) as conn:
        (raw,) = conn.execute("select config from tokens where id = ?", (token_id,)).fetchone()
    return json.loads(raw)


def _insert_clear_row(proxy: Proxy, name: str, config: dict[str, Any]) -> tuple[int, str]:
    """A token row as versions before encryption wrote it: provider keys in clear."""
    secret = f"mb-{name}-written-in-clear-0123456789abcdef"
    with sqlite3.connect(_db(proxy)) as conn:
        cursor = conn.execute(
            "insert into tokens (name, is_admin, secret_hash, config) values (?, 0, ?, ?)",
            (name, digest(secret), json.dumps(config)),
        )
        token_id = cursor.lastrowid
    assert token_id is not None
    return token_id, secret


def _upstream_keys(upstream: FakeUpstream) -> list[str]:
    return [r.headers.get("authorization", "") for r in upstream.proxied_requests]


def _full_config(proxy: Proxy) -> dict[str, Any]:
    """Every kind of stored secret: the three provider keys, one in a body, the userKey."""
    return {
        "name": "every-secret",
        "llm_base_url": proxy.upstream_url,
        "llm_api_key": LLM_KEY,
        **memory_fields(proxy.upstream_url),
        "memory_llm_api_key": MEMORY_LLM_KEY,
        "embed_api_key": EMBED_KEY,
        "embed_body": {"model": "bow-embed", "api_key": BODY_KEY},
        "memory": {
            "gateway": {"baseUrl": "http://127.0.0.1:9", "userId": "u1", "userKey": USER_KEY}
        },
    }


def test_a_copied_database_file_holds_no_provider_key(
    served: Served, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    created = proxy.admin("POST", "/tokens", json=_full_config(proxy))
    assert created.status_code == 201, created.text
    token_id = created.json()["id"]
    _, plain = proxy.create_token(name="plain", llm_api_key=LLM_KEY)
    assert proxy.chat(plain, **CHAT).status_code == 200
    assert _upstream_keys(upstream) == [f"Bearer {LLM_KEY}"]  # decrypted on the way out

    # The admin API still masks (it never had to decrypt anything for the operator).
    shown = proxy.admin("GET", f"/tokens/{token_id}")
    assert shown.status_code == 200 and shown.json()["usable"] is True
    assert shown.json()["config"]["memory"]["gateway"]["userKey"] == "uk_...abcd"
    for key in KEYS:
        assert key not in shown.text

    stored = _raw_config(proxy, token_id)
    for field in ("llm_api_key", "memory_llm_api_key", "embed_api_key"):
        assert stored[field].startswith(SEALED_PREFIX)
    assert stored["embed_body"]["api_key"].startswith(SEALED_PREFIX)
    assert stored["memory"]["gateway"]["userKey"].startswith(SEALED_PREFIX)
    assert stored["llm_base_url"] == proxy.upstream_url  # the rest stays inspectable

    served.drain()  # everything on disk, the WAL included
    files = _db_files(proxy)
    assert _db(proxy) in files
    for path in files:
        raw = path.read_bytes()
        for key in KEYS:
            assert key.encode() not in raw, f"{key} found in {path.name}"


def test_files_are_owner_only_and_loose_ones_are_tightened_at_start(
    served: Served, logs: pytest.LogCaptureFixture
) -> None:
    proxy = served.proxy
    proxy.create_token()  # a write, so the WAL side files exist
    data = proxy.settings.memory_bridge_data_dir
    key_file = proxy.settings.resolved_secret_key_path
    assert key_file.parent == data
    assert _mode(data) == 0o700 and _mode(key_file) == 0o600
    assert len(_db_files(proxy)) == 3  # db, -wal, -shm: SQLite gave them the db's mode
    for path in _db_files(proxy):
        assert _mode(path) == 0o600, path.name

    served.drain()
    loosened = [data, key_file, *_db_files(proxy)]
    for path in loosened:
        path.chmod(0o755 if path.is_dir() else 0o644)
    logs.clear()
    served.restart()
    assert _mode(data) == 0o700
    for path in loosened[1:]:
        assert _mode(path) == 0o600, path.name
    tightened = [r.getMessage() for r in logs.records if "tightened" in r.getMessage()]
    assert len(tightened) == len(loosened), tightened
    assert served.proxy.admin("GET", "/tokens").status_code == 200

    logs.clear()
    served.restart()  # already tight: said once, not at every start
    assert not [r for r in logs.records if "tightened" in r.getMessage()]


def test_init_tightens_a_loose_data_dir(tmp_path: Path, cli_env: dict[str, str]) -> None:
    data = Path(cli_env["MEMORY_BRIDGE_DATA_DIR"])
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    result = CliRunner().invoke(cli, ["init"])
    assert result.exit_code == 0, result.output
    assert _mode(data) == 0o700
    assert _mode(data / "memory_bridge.db") == 0o600
    assert _mode(data / "secret.key") == 0o600
    assert f"Secret key file: {data / 'secret.key'}" in result.output


def test_rows_written_in_clear_still_load_and_are_encrypted_at_init_and_start(
    served: Served, upstream: FakeUpstream
) -> None:
    proxy = served.proxy
    served.drain()
    config = {"name": "old", "llm_base_url": proxy.upstream_url, "llm_api_key": LLM_KEY}
    by_init, by_init_secret = _insert_clear_row(proxy, "by-init", config)
    assert _raw_config(proxy, by_init)["llm_api_key"] == LLM_KEY
    assert asyncio.run(initialise(proxy.settings)) is None  # `memory-bridge init` again
    assert _raw_config(proxy, by_init)["llm_api_key"].startswith(SEALED_PREFIX)

    gateway = {"baseUrl": "http://127.0.0.1:9", "userId": "u", "userKey": USER_KEY}
    at_start, at_start_secret = _insert_clear_row(
        proxy, "at-start", {**config, "memory": {"gateway": gateway}}
    )
    served.restart()
    stored = _raw_config(served.proxy, at_start)
    assert stored["llm_api_key"].startswith(SEALED_PREFIX)
    assert stored["memory"]["gateway"]["userKey"].startswith(SEALED_PREFIX)
    for secret in (by_init_secret, at_start_secret):
        assert served.proxy.chat(secret, **CHAT).status_code == 200
    assert _upstream_keys(upstream) == [f"Bearer {LLM_KEY}"] * 2


def test_a_wrong_key_makes_its_tokens_unusable_not_the_server(
    served: Served, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    token_id, token = served.proxy.create_token(llm_api_key=LLM_KEY)
    served.drain()
    key_file = served.proxy.settings.resolved_secret_key_path
    write_private(key_file, Fernet.generate_key().decode() + "\n")  # the right key is lost
    logs.clear()
    served.restart()
    proxy = served.proxy

    reply = proxy.chat(token, **CHAT)
    assert reply.status_code == 401 and upstream.proxied_requests == []
    lines = [
        r.getMessage() for r in logs.records if f"token {token_id} is unusable" in r.getMessage()
    ]
    assert lines and all("cannot be decrypted" in line for line in lines), lines
    shown = proxy.admin("GET", f"/tokens/{token_id}").json()
    assert shown["usable"] is False and "cannot be decrypted" in shown["config_error"]
    everything = "\n".join(r.getMessage() for r in logs.records) + json.dumps(shown)
    assert LLM_KEY not in everything and SEALED_PREFIX not in everything

    # The operator repairs it by sending the whole config again (as for any broken row).
    body = {"name": "again", "llm_base_url": proxy.upstream_url, "llm_api_key": LLM_KEY}
    assert proxy.admin("PATCH", f"/tokens/{token_id}", json=body).status_code == 200
    assert proxy.chat(token, **CHAT).status_code == 200
    assert _upstream_keys(upstream) == [f"Bearer {LLM_KEY}"]


# -- rotation, through the CLI as an operator runs it -------------------------------------------


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "MEMORY_BRIDGE_DATA_DIR": str(tmp_path / "data"),
        "DATABASE_URL": "",
        "MEMORY_TEMPLATE_PATH": str(REPO / "templates" / "memory_template.md"),
        "MEMORY_TEMPLATE_ZH_PATH": str(REPO / "templates" / "memory_template_zh.md"),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MEMORY_BRIDGE_SECRET_KEY", raising=False)
    monkeypatch.delenv("MEMORY_BRIDGE_SECRET_KEY_FILE", raising=False)
    return values


class _Operator:
    """`memory-bridge init`, then the server started and stopped on the same data."""

    def __init__(self, data: Path, upstream_url: str) -> None:
        self.data, self.upstream_url = data, upstream_url
        result = self.run("init")
        [line] = [x for x in result.splitlines() if x.startswith("Admin token: ")]
        self.admin = line.removeprefix("Admin token: ")

    def run(self, *args: str) -> str:
        result = CliRunner().invoke(cli, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    @contextlib.contextmanager
    def serving(self, secret_key: str = "") -> Iterator[str]:
        settings = make_settings(self.data, memory_bridge_secret_key=secret_key)
        with LoopbackServer(create_app(settings)) as server:
            yield server.url

    def create_token(self, url: str) -> tuple[int, str]:
        body = {"name": "t", "llm_base_url": self.upstream_url, "llm_api_key": LLM_KEY}
        reply = httpx.post(
            f"{url}/v1/admin/tokens", json=body, headers={"Authorization": f"Bearer {self.admin}"}
        )
        assert reply.status_code == 201, reply.text
        return reply.json()["id"], reply.json()["token"]


def _stored_key(data: Path, token_id: int) -> bytes:
    with sqlite3.connect(data / "memory_bridge.db") as conn:
        (raw,) = conn.execute("select config from tokens where id = ?", (token_id,)).fetchone()
    return str(json.loads(raw)["llm_api_key"]).removeprefix(SEALED_PREFIX).encode()


def _chat_works(url: str, token: str) -> bool:
    reply = httpx.post(
        f"{url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {token}"}
    )
    return reply.status_code == 200


def test_rotate_secret_key_with_the_key_file(
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
) -> None:
    data = Path(cli_env["MEMORY_BRIDGE_DATA_DIR"])
    operator = _Operator(data, upstream_server[1])
    key_file = data / "secret.key"
    [old] = read_key_file(key_file)
    with operator.serving() as url:
        token_id, token = operator.create_token(url)
        assert _chat_works(url, token)
    assert Fernet(old).decrypt(_stored_key(data, token_id)) == LLM_KEY.encode()

    output = operator.run("rotate-secret-key")
    assert "1 token config(s)" in output and "new key only" in output
    [new] = read_key_file(key_file)
    assert new != old and _mode(key_file) == 0o600
    assert new.decode() not in output and old.decode() not in output
    sealed = _stored_key(data, token_id)
    assert Fernet(new).decrypt(sealed) == LLM_KEY.encode()
    with pytest.raises(InvalidToken):
        Fernet(old).decrypt(sealed)
    with operator.serving() as url:
        assert _chat_works(url, token)
    assert _upstream_keys(upstream) == [f"Bearer {LLM_KEY}"] * 2


def test_rotate_secret_key_with_keys_from_the_environment(
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    upstream_server: tuple[FakeUpstream, str],
) -> None:
    data = Path(cli_env["MEMORY_BRIDGE_DATA_DIR"])
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("MEMORY_BRIDGE_SECRET_KEY", old)
    operator = _Operator(data, upstream_server[1])
    assert not (data / "secret.key").exists()  # the environment's key: no file at all
    with operator.serving(old) as url:
        token_id, token = operator.create_token(url)
        assert _chat_works(url, token)

    monkeypatch.setenv("MEMORY_BRIDGE_SECRET_KEY", f"{new},{old}")
    output = operator.run("rotate-secret-key")
    assert "1 token config(s)" in output and "remove every key but the first" in output
    assert Fernet(new.encode()).decrypt(_stored_key(data, token_id)) == LLM_KEY.encode()
    with operator.serving(new) as url:  # the old key is gone and nothing needs it
        assert _chat_works(url, token)
    assert not (data / "secret.key").exists()


# -- URLs carrying credentials, refused at save time -------------------------------------------

URL_SECRET = "hunter2-AtRest-9f8e7d"
CREDENTIAL_URLS = [
    f"http://operator:{URL_SECRET}@127.0.0.1:9/v1",
    f"http://127.0.0.1:9/v1?api_key={URL_SECRET}",
    f"http://127.0.0.1:9/v1?api-version=1&Access_Token={URL_SECRET}",
]


def _with_url(proxy: Proxy, field: str, url: str) -> dict[str, Any]:
    if field == "memory.gateway.baseUrl":
        gateway = {"baseUrl": url, "userId": "u", "userKey": USER_KEY}
        return {"memory": {"mode": "hybrid", "gateway": gateway}}
    return {field: url}


@pytest.mark.parametrize(
    "field", ["llm_base_url", "memory_llm_base_url", "embed_base_url", "memory.gateway.baseUrl"]
)
@pytest.mark.parametrize("url", CREDENTIAL_URLS, ids=["userinfo", "key", "token"])
def test_urls_with_credentials_are_refused_on_create_and_update(
    proxy: Proxy, field: str, url: str
) -> None:
    body = {"name": "t", "llm_base_url": proxy.upstream_url, **_with_url(proxy, field, url)}
    created = proxy.admin("POST", "/tokens", json=body)
    assert created.status_code == 422, created.text
    message = created.json()["error"]["message"]
    assert message.startswith(field) and URL_SECRET not in created.text
    assert proxy.admin("GET", "/tokens").json()["data"] == []

    token_id, _ = proxy.create_token(name="good")
    before = proxy.admin("GET", f"/tokens/{token_id}").json()
    patched = proxy.admin("PATCH", f"/tokens/{token_id}", json=_with_url(proxy, field, url))
    assert patched.status_code == 422, patched.text
    assert patched.json()["error"]["message"].startswith(field)
    assert URL_SECRET not in patched.text
    assert proxy.admin("GET", f"/tokens/{token_id}").json() == before


def test_a_url_with_an_ordinary_query_is_still_accepted(proxy: Proxy) -> None:
    url = f"{proxy.upstream_url}?api-version=2024-02-01"
    token_id, _ = proxy.create_token(llm_base_url=url)
    assert proxy.admin("GET", f"/tokens/{token_id}").json()["config"]["llm_base_url"] == url
