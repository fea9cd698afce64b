"""`memory-bridge serve` (and the benchmark's fast fake upstream) as real child processes.

    data = tmp_path / "data"
    env = serve_env(data)
    admin = init_data_dir(env, tmp_path)
    with ServeProcess.start(env, tmp_path) as served:
        httpx.get(f"{served.url}/health")
        served.open_fds()

Each child is a process-group leader with its output sent to a log file (its tail is shown
when it fails to start); `stop()` sends SIGTERM to the group and waits, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx

from tests.support.proxy import REPO

START_TIMEOUT = 60.0  # an upper bound for start-up on a loaded machine, not a measurement
STOP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a `memory-bridge` child: this data dir, no proxies, Mem0 offline."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env.update(
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        MEMORY_BRIDGE_DATA_DIR=str(data_dir),
        DATABASE_URL="",
        LOG_LEVEL="WARNING",
        FORWARD_HEADERS="",
        MEMORY_TEMPLATE_PATH=str(REPO / "templates" / "memory_template.md"),
        MEMORY_TEMPLATE_ZH_PATH=str(REPO / "templates" / "memory_template_zh.md"),
        MEM0_TELEMETRY="False",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        # Episodic memory BM25-only unless a test asks for the local model (seconds to load).
        EPISODIC_DEFAULT_EMBEDDER="none",
    )
    env.update(extra)
    return env


def init_data_dir(env: dict[str, str], workdir: Path) -> str:
    """`memory-bridge init`; returns the admin token."""
    token_file = workdir / "admin-token"
    done = subprocess.run(
        [sys.executable, "-m", "memory_bridge", "init", "--admin-token-file", str(token_file)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"memory-bridge init failed:\n{done.stdout}\n{done.stderr}"
    return token_file.read_text().strip()


class ServeProcess:
    """One child process serving HTTP on 127.0.0.1:`port`."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
        self.proc = proc
        self.url = url
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(
        cls,
        env: dict[str, str],
        workdir: Path,
        *,
        name: str = "memory-bridge",
        argv: Sequence[str] | None = None,
        health: str = "/health",
    ) -> ServeProcess:
        """`memory-bridge serve` (or `argv`, which gets `--port <port>` appended), ready once
        `health` answers 200. A port taken between choosing and binding it is retried."""
        command = list(argv or [sys.executable, "-m", "memory_bridge", "serve"])
        last = ""
        for attempt in range(3):
            port = free_port()
            log_path = workdir / f"{name}-{attempt}.log"
            with log_path.open("wb") as log_file:
                proc = subprocess.Popen(
                    [*command, "--port", str(port)],
                    env=env,
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            served = cls(proc, f"http://127.0.0.1:{port}", log_path)
            if served._wait_ready(health):
                return served
            served.stop()
            last = served.log_tail()
        raise RuntimeError(f"{name} did not start:\n{last}")

    def _wait_ready(self, health: str) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + health, timeout=2, trust_env=False).status_code == 200:
                    return True
            time.sleep(0.05)
        return False

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def open_fds(self) -> list[str]:
        """What each of the process's open file descriptors points at (`readlink`)."""
        out = []
        fd_dir = Path(f"/proc/{self.pid}/fd")
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):  # closed while we looked
                out.append(os.readlink(fd))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_bench_upstream(workdir: Path, keep_alive: int = 600) -> ServeProcess:
    """The benchmark's fast fake upstream (`scripts/bench/fake_upstream.py`: fixed replies,
    streams of 200 SSE events ending with `[DONE]`) under uvicorn, closing connections left
    idle for `keep_alive` seconds."""
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(REPO / "scripts" / "bench"),
        "fake_upstream:app",
        "--host",
        "127.0.0.1",
        "--log-level",
        "warning",
        "--no-access-log",
        "--timeout-keep-alive",
        str(keep_alive),
    ]
    return ServeProcess.start(
        serve_env(workdir / "unused"), workdir, name="fake-upstream", argv=argv
    )
