"""The `memory-bridge` command as a newcomer runs it: init, serve, shutdown."""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from memory_bridge.cli.main import cli
from tests.fakes.upstream import FakeUpstream, Scenario
from tests.support.loopback import LoopbackServer
from tests.support.proxy import REPO


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`serve` installs a handler on CliRunner's stream, which closes when the run ends."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "MEMORY_BRIDGE_DATA_DIR": str(tmp_path / "data"),
        "DATABASE_URL": "",
        "MEMORY_TEMPLATE_PATH": str(REPO / "templates" / "memory_template.md"),
        "MEMORY_TEMPLATE_ZH_PATH": str(REPO / "templates" / "memory_template_zh.md"),
        "LOG_LEVEL": "INFO",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def _admin_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Admin token: ")]


def test_init_creates_one_admin_token_and_is_safe_to_rerun(
    env: dict[str, str], tmp_path: Path
) -> None:
    runner = CliRunner()
    token_file = tmp_path / "admin-token"
    first = runner.invoke(cli, ["init", "--admin-token-file", str(token_file)])
    assert first.exit_code == 0, first.output
    [line] = _admin_lines(first.output)
    secret = line.removeprefix("Admin token: ")
    assert secret.startswith("mb-admin-")
    assert token_file.read_text().strip() == secret
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    data = Path(env["MEMORY_BRIDGE_DATA_DIR"])
    assert (data / ".initialized").exists() and not (data / ".initializing").exists()

    second = runner.invoke(cli, ["init"])
    assert second.exit_code == 0
    assert _admin_lines(second.output) == []
    assert "already exists" in second.output
    assert token_file.read_text().strip() == secret


def test_an_interrupted_init_is_reported_and_rerun(env: dict[str, str]) -> None:
    runner = CliRunner()
    data = Path(env["MEMORY_BRIDGE_DATA_DIR"])
    data.mkdir(parents=True)
    (data / ".initializing").touch()
    served = runner.invoke(cli, ["serve"])
    assert served.exit_code != 0
    assert "interrupted" in served.output and "memory-bridge init" in served.output
    again = runner.invoke(cli, ["init"])
    assert again.exit_code == 0
    assert "interrupted" in again.output
    assert len(_admin_lines(again.output)) == 1
    assert not (data / ".initializing").exists()


def test_serve_refuses_an_uninitialised_data_dir(env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["serve"])
    assert result.exit_code == 1
    assert "memory-bridge init" in result.output


def test_serve_exits_before_binding_when_a_template_is_missing(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["init"]).exit_code == 0
    monkeypatch.setenv("MEMORY_TEMPLATE_PATH", str(tmp_path / "missing.md"))
    port = _free_port()
    result = runner.invoke(cli, ["serve", "--port", str(port)])
    assert result.exit_code == 2
    assert "missing.md" in result.output
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_rotate_admin_token_replaces_the_old_one(env: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    first = _admin_lines(runner.invoke(cli, ["init"]).output)[0]
    token_file = tmp_path / "new-token"
    rotated = runner.invoke(cli, ["rotate-admin-token", "--admin-token-file", str(token_file)])
    assert rotated.exit_code == 0
    second = _admin_lines(rotated.output)[0]
    assert second != first
    assert token_file.read_text().strip() == second.removeprefix("Admin token: ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def upstream_url() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with LoopbackServer(fake.app) as server:
        yield fake, server.url


@pytest.mark.serial  # SIGTERM to a real server while a request is in flight
def test_sigterm_lets_the_in_flight_request_finish(
    env: dict[str, str], upstream_url: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream_url
    runner = CliRunner()
    admin = _admin_lines(runner.invoke(cli, ["init"]).output)[0].removeprefix("Admin token: ")
    port = _free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memory_bridge", "serve", "--port", str(port)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc)
        created = httpx.post(
            f"{base}/v1/admin/tokens",
            headers={"Authorization": f"Bearer {admin}"},
            json={"name": "t", "llm_base_url": url},
        ).json()
        fake.enqueue(Scenario(content="finished despite shutdown", delay=1.0))
        result: dict[str, httpx.Response] = {}

        def call() -> None:
            result["reply"] = httpx.post(
                f"{base}/v1/chat/completions",
                headers={"Authorization": f"Bearer {created['token']}"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                timeout=300,
            )

        worker = threading.Thread(target=call)
        worker.start()
        while not fake.chat_requests:  # the request is in flight at the upstream
            assert worker.is_alive(), "the request ended before it reached the upstream"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        worker.join(30)
        # uvicorn re-raises the captured signal after a clean shutdown, as a daemon should.
        assert proc.wait(30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    reply = result["reply"]
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == "finished despite shutdown"
    output = log_path.read_text()
    assert "rid=" in output
    assert "MemoryBridge stopped" in output  # the lifespan's shutdown (drain, close) ran
    assert admin not in output and created["token"] not in output


def _wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    """Until /ready answers 200: the local model is loaded, so the first request does not
    pay its load on a busy machine. The bound only keeps a broken build from hanging."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError("serve did not become ready")
