"""The Qdrant child's lifecycle, for real, with a stand-in server (tests/fakes/qdrant_standin.py).

Timeouts here are bounds on how long a test may wait, never assertions about speed.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_bridge.server.qdrant_managed import managed_qdrant, qdrant_config_from
from memory_bridge.server.qdrant_process import (
    QdrantProcess,
    QdrantProcessConfig,
    QdrantStartError,
)
from memory_bridge.settings import Settings

STANDIN = Path(__file__).resolve().parents[1] / "fakes" / "qdrant_standin.py"
BOUND = 30.0  # the longest any single wait in these tests may take


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    """The stand-in as an executable, as Qdrant's binary would be (exec: no shell in between)."""
    path = tmp_path / "bin" / "qdrant"
    path.parent.mkdir()
    path.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _config(tmp_path: Path, binary: Path, **overrides: Any) -> QdrantProcessConfig:
    env = overrides.pop("env", {})
    values: dict[str, Any] = {
        "binary": binary,
        "storage_path": tmp_path / "storage",
        "port": _free_port(),
        "log_path": tmp_path / "logs" / "qdrant.log",
        "startup_timeout": BOUND,
        "stop_grace": BOUND,
        "extra_env": env,
    }
    values.update(overrides)
    return QdrantProcessConfig(**values)


def _recorded(config: QdrantProcessConfig) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((config.storage_path / "standin-env.json").read_text())
    return record


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def processes() -> Any:
    """Every QdrantProcess a test makes is stopped afterwards, whatever happened."""
    made: list[QdrantProcess] = []

    def make(config: QdrantProcessConfig) -> QdrantProcess:
        process = QdrantProcess(config)
        made.append(process)
        return process

    yield make
    for process in made:
        if process.pid is not None and process.running:
            os.killpg(process.pid, signal.SIGKILL)
        process.stop()


def test_starts_ready_with_the_seed_settings_and_its_own_session(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    config = _config(tmp_path, binary)
    process = processes(config)
    process.start()

    assert process.running
    assert process.url == f"http://127.0.0.1:{config.port}"
    assert httpx.get(f"{process.url}/readyz", timeout=BOUND, trust_env=False).status_code == 200
    record = _recorded(config)
    env = record["env"]
    assert env["QDRANT__STORAGE__STORAGE_PATH"] == str(config.storage_path.resolve())
    assert env["QDRANT__SERVICE__HTTP_PORT"] == str(config.port)
    assert env["QDRANT__SERVICE__HOST"] == "127.0.0.1"
    assert env["QDRANT__STORAGE__OPTIMIZERS__MAX_OPTIMIZATION_THREADS"] == "1"
    assert env["QDRANT__STORAGE__PERFORMANCE__MAX_SEARCH_THREADS"] == "4"
    assert env["QDRANT__TELEMETRY_DISABLED"] == "true"
    grpc = int(env["QDRANT__SERVICE__GRPC_PORT"])
    assert grpc == process.grpc_port
    assert grpc != config.port
    assert record["pid"] == process.pid  # the wrapper exec'd: signals reach the server itself
    assert record["sid"] == process.pid  # its own session: a terminal's Ctrl+C is not for it
    assert record["cwd"] == str(config.storage_path.resolve())
    log = str(config.log_path.resolve())
    assert (record["stdin"], record["stdout"], record["stderr"]) == ("/dev/null", log, log)


def test_extra_env_is_passed_and_may_override(tmp_path: Path, binary: Path, processes: Any) -> None:
    config = _config(
        tmp_path,
        binary,
        grpc_port=_free_port(),
        env={"QDRANT__LOG_LEVEL": "DEBUG", "QDRANT__STORAGE__PERFORMANCE__MAX_SEARCH_THREADS": "2"},
    )
    process = processes(config)
    process.start()

    env = _recorded(config)["env"]
    assert env["QDRANT__LOG_LEVEL"] == "DEBUG"
    assert env["QDRANT__STORAGE__PERFORMANCE__MAX_SEARCH_THREADS"] == "2"
    assert env["QDRANT__SERVICE__GRPC_PORT"] == str(config.grpc_port)


def test_keeps_answering_while_it_logs_heavily(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    config = _config(tmp_path, binary, env={"STANDIN_LOG_RATE": str(1 << 20)})
    process = processes(config)
    process.start()
    start_size = config.log_path.stat().st_size
    target = 2 << 20  # 32 pipe buffers: a pipe nobody reads would have stalled it long before

    checks = 0
    deadline = time.monotonic() + BOUND * 2
    with httpx.Client(trust_env=False, timeout=BOUND) as client:
        while config.log_path.stat().st_size - start_size < target:
            assert time.monotonic() < deadline, "the stand-in stopped logging"
            assert client.get(f"{process.url}/healthz").status_code == 200
            checks += 1
            time.sleep(0.05)
        assert client.get(f"{process.url}/healthz").status_code == 200

    assert checks > 0
    text = config.log_path.read_text()
    assert "standin: log burst" in text
    assert "standin: GET /healthz -> 200" in text


def test_control_an_undrained_pipe_stalls_the_standin(tmp_path: Path) -> None:
    """Why the test above means something: with a pipe nobody reads, the stand-in stops."""
    port = _free_port()
    env = dict(
        os.environ,
        QDRANT__SERVICE__HTTP_PORT=str(port),
        QDRANT__STORAGE__STORAGE_PATH=str(tmp_path / "storage"),
    )
    child = subprocess.Popen(
        [sys.executable, str(STANDIN)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        stalled = False
        deadline = time.monotonic() + BOUND
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                try:
                    client.get(f"http://127.0.0.1:{port}/healthz")
                except httpx.ReadTimeout:
                    stalled = True
                    break
                except httpx.ConnectError:
                    pass  # not listening yet
                time.sleep(0.05)
        assert stalled
    finally:
        child.kill()
        child.communicate()


def test_stop_is_graceful_and_idempotent(tmp_path: Path, binary: Path, processes: Any) -> None:
    config = _config(tmp_path, binary)
    process = processes(config)
    assert process.stop() is None  # never started: nothing to do

    process = processes(config)
    process.start()
    pid = process.pid

    assert process.stop() == 0
    assert process.stop() == 0
    assert not process.running
    assert _gone(pid)
    text = config.log_path.read_text()
    assert "standin: shutting down" in text
    assert "memory-bridge: qdrant stopped (exit code 0)" in text
    with pytest.raises(RuntimeError):
        process.start()


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    config = _config(tmp_path, binary, stop_grace=0.5, env={"STANDIN_IGNORE_SIGTERM": "1"})
    process = processes(config)
    process.start()

    assert process.stop() == -signal.SIGKILL
    assert _gone(process.pid)
    assert "standin: ignoring SIGTERM" in config.log_path.read_text()


def test_a_child_exiting_during_startup_is_a_start_error_with_the_log_tail(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    config = _config(
        tmp_path, binary, env={"STANDIN_STARTUP_DELAY": "1000", "STANDIN_EXIT_AFTER": "0.3"}
    )
    process = processes(config)

    with pytest.raises(QdrantStartError) as error:
        process.start()

    message = str(error.value)
    assert "exited with code 3 during startup" in message
    assert "standin: fatal: simulated crash" in message
    assert str(config.log_path) in message
    assert process.returncode == 3


def test_a_child_that_never_becomes_ready_times_out_and_is_stopped(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    config = _config(tmp_path, binary, startup_timeout=1.0, env={"STANDIN_STARTUP_DELAY": "1000"})
    process = processes(config)

    with pytest.raises(QdrantStartError, match="did not become ready") as error:
        process.start()

    tail = str(error.value).split("qdrant.log:\n", 1)[1]
    assert tail.splitlines()[-1].startswith("standin: ")  # the tail of its log
    assert process.returncode == 0  # it was asked to stop, and did
    assert _gone(process.pid)
    assert "standin: shutting down" in config.log_path.read_text()


def test_falls_back_to_healthz_without_readyz(tmp_path: Path, binary: Path, processes: Any) -> None:
    config = _config(tmp_path, binary, env={"STANDIN_NO_READYZ": "1"})
    process = processes(config)
    process.start()

    text = config.log_path.read_text()
    assert "GET /readyz -> 404" in text
    assert "GET /healthz -> 200" in text


def test_a_port_already_in_use_fails_before_spawning(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        config = _config(tmp_path, binary, port=squatter.getsockname()[1])
        process = processes(config)
        with pytest.raises(QdrantStartError, match="is not available"):
            process.start()
    assert process.pid is None


@pytest.mark.parametrize("name", ["no-such-qdrant-binary", "missing/qdrant"])
def test_a_missing_binary_is_a_start_error(tmp_path: Path, processes: Any, name: str) -> None:
    process = processes(_config(tmp_path, Path(name)))
    with pytest.raises(QdrantStartError, match="not found"):
        process.start()


def test_a_binary_that_is_not_executable_is_a_start_error(tmp_path: Path, processes: Any) -> None:
    path = tmp_path / "qdrant"
    path.write_text("not a program")
    process = processes(_config(tmp_path, path))
    with pytest.raises(QdrantStartError, match="not executable"):
        process.start()


def test_a_file_that_cannot_be_executed_is_a_start_error(tmp_path: Path, processes: Any) -> None:
    path = tmp_path / "qdrant"
    path.write_bytes(b"\x00\x01 not a program")
    path.chmod(0o755)
    process = processes(_config(tmp_path, path))
    with pytest.raises(QdrantStartError, match="cannot run Qdrant binary"):
        process.start()
    assert process.pid is None


def test_an_invalid_port_is_a_start_error(tmp_path: Path, binary: Path, processes: Any) -> None:
    process = processes(_config(tmp_path, binary, port=0))
    with pytest.raises(QdrantStartError, match="between 1 and 65535"):
        process.start()


def test_watch_needs_a_started_process_and_only_once(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    process = processes(_config(tmp_path, binary))
    with pytest.raises(RuntimeError, match="start"):
        process.watch(lambda code: None)
    process.start()
    process.watch(lambda code: None)
    with pytest.raises(RuntimeError, match="already"):
        process.watch(lambda code: None)


def test_a_failing_exit_callback_is_logged(
    tmp_path: Path, binary: Path, processes: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="memory_bridge.server.qdrant_process")
    process = processes(_config(tmp_path, binary, env={"STANDIN_EXIT_AFTER": "0.5"}))
    process.start()
    called = threading.Event()

    def on_exit(code: int) -> None:
        called.set()
        raise ValueError("callback bug")

    process.watch(on_exit, interval=0.05)
    assert called.wait(BOUND)
    deadline = time.monotonic() + BOUND
    while "exit callback failed" not in caplog.text:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_the_watcher_notices_a_crash(
    tmp_path: Path, binary: Path, processes: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="memory_bridge.server.qdrant_process")
    config = _config(tmp_path, binary, env={"STANDIN_EXIT_AFTER": "1"})
    process = processes(config)
    process.start()
    codes: list[int] = []
    noticed = threading.Event()

    def on_exit(code: int) -> None:
        codes.append(code)
        noticed.set()

    process.watch(on_exit, interval=0.1)

    assert noticed.wait(BOUND)
    assert codes == [3]
    assert "exited unexpectedly with code 3" in caplog.text
    assert "simulated crash" in caplog.text
    assert process.stop() == 3


def test_the_watcher_is_quiet_when_the_child_is_stopped(
    tmp_path: Path, binary: Path, processes: Any
) -> None:
    process = processes(_config(tmp_path, binary))
    process.start()
    calls: list[int] = []
    process.watch(calls.append, interval=0.01)

    assert process.stop() == 0
    time.sleep(0.1)
    assert calls == []


def _settings(tmp_path: Path, binary: Path | str, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "memory_bridge_data_dir": tmp_path / "data",
        "qdrant_binary": str(binary),
        "qdrant_port": _free_port(),
    }
    values.update(extra)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_managed_qdrant_without_a_binary_yields_none(tmp_path: Path) -> None:
    with managed_qdrant(_settings(tmp_path, "")) as url:
        assert url is None
    with managed_qdrant(Settings(_env_file=None)) as url:  # type: ignore[call-arg]
        assert url is None
    assert not (tmp_path / "data").exists()


def test_config_from_settings_defaults_under_the_data_dir(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "/opt/qdrant/qdrant", qdrant_port=7333)
    config = qdrant_config_from(settings)

    assert config is not None
    assert config.binary == Path("/opt/qdrant/qdrant")
    assert config.port == 7333
    assert config.storage_path == tmp_path / "data" / "qdrant-server"
    assert config.log_path == tmp_path / "data" / "qdrant.log"
    assert config.extra_env == {}

    settings = _settings(
        tmp_path,
        "qdrant",
        qdrant_storage_path=tmp_path / "q",
        qdrant_log_path=tmp_path / "q.log",
        qdrant_api_key="key-for-the-child",
        qdrant_stop_grace=2,
    )
    config = qdrant_config_from(settings)
    assert config is not None
    assert (config.storage_path, config.log_path) == (tmp_path / "q", tmp_path / "q.log")
    assert config.extra_env == {"QDRANT__SERVICE__API_KEY": "key-for-the-child"}
    assert config.stop_grace == 2.0


def test_managed_qdrant_runs_the_child_for_the_block_only(tmp_path: Path, binary: Path) -> None:
    settings = _settings(tmp_path, binary)
    with managed_qdrant(settings, on_exit=lambda code: None) as url:
        assert url == f"http://127.0.0.1:{settings.qdrant_port}"
        assert httpx.get(f"{url}/healthz", trust_env=False, timeout=BOUND).status_code == 200
        pid = _recorded_pid(tmp_path)

    assert _gone(pid)
    assert "standin: shutting down" in (tmp_path / "data" / "qdrant.log").read_text()


def test_managed_qdrant_stops_the_child_when_the_block_raises(tmp_path: Path, binary: Path) -> None:
    def serve() -> None:
        with managed_qdrant(_settings(tmp_path, binary), on_exit=lambda code: None):
            raise KeyboardInterrupt  # Ctrl+C after uvicorn has drained

    with pytest.raises(KeyboardInterrupt):
        serve()

    assert _gone(_recorded_pid(tmp_path))


def _recorded_pid(tmp_path: Path) -> int:
    record = json.loads((tmp_path / "data" / "qdrant-server" / "standin-env.json").read_text())
    pid: int = record["pid"]
    return pid


needs_default_sigterm = pytest.mark.skipif(
    signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL,
    reason="someone else handles SIGTERM in this process",
)


@needs_default_sigterm
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_to_the_proxy_unwinds_and_stops_the_child(
    tmp_path: Path, binary: Path, sig: signal.Signals
) -> None:
    """What uvicorn does after draining: restore our handler and raise SIGTERM again.

    SIGHUP (the terminal went away) is handled as SIGTERM.
    """
    if signal.getsignal(sig) is not signal.SIG_DFL:
        pytest.skip(f"someone else handles {sig.name} in this process")
    # Under `nohup` SIGHUP starts ignored: what is checked is that the handlers are given back.
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

    def serve() -> None:
        with managed_qdrant(_settings(tmp_path, binary), on_exit=lambda code: None):
            os.kill(os.getpid(), sig)
            time.sleep(BOUND)  # the handler raises here

    with pytest.raises(SystemExit) as exit_:
        serve()

    assert exit_.value.code == 128 + signal.SIGTERM
    assert _gone(_recorded_pid(tmp_path))
    assert "standin: shutting down" in (tmp_path / "data" / "qdrant.log").read_text()
    assert {s: signal.getsignal(s) for s in before} == before


@needs_default_sigterm
def test_a_crash_of_the_child_shuts_the_proxy_down_by_default(tmp_path: Path, binary: Path) -> None:
    def serve() -> None:
        with managed_qdrant(_settings(tmp_path, binary), watch_interval=0.1):
            os.kill(_recorded_pid(tmp_path), signal.SIGKILL)  # as the OOM killer would
            time.sleep(BOUND)  # the watcher SIGTERMs us; the handler raises here

    with pytest.raises(SystemExit) as exit_:
        serve()

    assert exit_.value.code == 128 + signal.SIGTERM
    assert _gone(_recorded_pid(tmp_path))
    assert "stopped (exit code -9)" in (tmp_path / "data" / "qdrant.log").read_text()
