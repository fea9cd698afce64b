"""The processes a benchmark starts on 127.0.0.1: free ports, their environment, their logs, and
stopping every one of them at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def terminate(signum: int, _frame: Any) -> None:
    """SIGTERM handler: exit through `finally`, so that every child is stopped."""
    raise SystemExit(128 + signum)


@dataclass
class Children:
    """Every process this run starts; each is a process-group leader, stopped at the end."""

    logs: Path
    procs: list[tuple[str, subprocess.Popen[Any]]] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: Path,
        *,
        pipe_stdio: bool = False,
    ) -> subprocess.Popen[Any]:
        log_file: IO[bytes] = (self.logs / f"{name}.log").open("ab")
        proc: subprocess.Popen[Any] = subprocess.Popen(  # noqa: S603 — our own argv
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if pipe_stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe_stdio else log_file,
            stderr=log_file,
            start_new_session=True,
            text=pipe_stdio,
        )
        log_file.close()
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop_all(self) -> None:
        """Stop in reverse start order, each before the next, so that a proxy still draining
        its background work (memory writes) at shutdown has its upstream to talk to."""
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    log(f"{name} did not stop on SIGTERM; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        self.procs.clear()


def wait_ready(
    url: str, proc: subprocess.Popen[Any], name: str, timeout: float, interval: float = 0.1
) -> None:
    """Until `url` answers 200; `interval` between tries (finer where start-up is timed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with status {proc.returncode} while starting")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(interval)
    raise RuntimeError(f"{name} was not ready after {timeout:.0f} s ({url})")


def wait_warm(url: str, proc: subprocess.Popen[Any], timeout: float) -> None:
    """Until `GET /ready` stops answering 503 (warming): ready, or a build without it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} while warming")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2, trust_env=False).status_code != 503:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the server was still warming after {timeout:.0f} s ({url})")


def start_fake_upstream(
    children: Children, tmp: Path, **env: str
) -> tuple[str, subprocess.Popen[Any]]:
    """`bench/fake_upstream.py` on a free port, ready: its base URL and its process."""
    port = free_port()
    proc = children.start(
        "fake-upstream",
        [sys.executable, str(BENCH_DIR / "fake_upstream.py"), "--port", str(port)],
        child_env(**env),
        tmp,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", proc, "fake upstream", 30)
    return url, proc
