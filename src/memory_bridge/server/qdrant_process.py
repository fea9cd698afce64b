"""Run a Qdrant server binary as a child of `memory-bridge serve` (the seed's host manager).

When ``QDRANT_BINARY`` is set, ``serve`` wraps uvicorn in ``managed_qdrant``
(`qdrant_managed.py`)::

    with managed_qdrant(settings):
        uvicorn.Server(config).run()

so the order is: the child starts and answers its readiness endpoint, then the proxy serves;
on shutdown the proxy drains first (uvicorn returns), then the child is stopped (SIGTERM,
then SIGKILL after a grace period).

The child gets the seed's concurrency settings (one optimisation thread, four search
threads), listens on 127.0.0.1 only, runs in its own session (a Ctrl+C in the proxy's
terminal reaches the proxy, which then stops the child in order), and writes stdout and
stderr to a log file: never to a pipe nobody reads, which would block it once the pipe's
buffer (64 KiB) is full.
"""

from __future__ import annotations

import http.client
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "QdrantProcess",
    "QdrantProcessConfig",
    "QdrantStartError",
]

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_PORT = 6333
READY_PATHS = ("/readyz", "/healthz")  # /readyz since Qdrant 1.5; /healthz before that
LOG_TAIL_BYTES = 4096
LOG_TAIL_LINES = 20
POLL_INTERVAL = 0.1


class QdrantStartError(RuntimeError):
    """The child could not be started, exited during startup, or never became ready."""


@dataclass(frozen=True)
class QdrantProcessConfig:
    """How to run the child. Relative paths are resolved against the current directory.

    ``binary`` is a path to the executable, or a bare name looked up on ``PATH``.
    ``grpc_port=None`` picks a free port (Qdrant's environment variables cannot switch gRPC
    off: its built-in config sets 6334, and an environment value cannot be null).
    ``extra_env`` is applied last, so it can override any of the variables set here.
    """

    binary: Path
    storage_path: Path
    port: int
    log_path: Path
    grpc_port: int | None = None
    startup_timeout: float = 30.0
    stop_grace: float = 10.0
    extra_env: Mapping[str, str] = field(default_factory=dict)


class QdrantProcess:
    """One child Qdrant server: ``start()`` once, ``stop()`` any number of times."""

    def __init__(self, config: QdrantProcessConfig) -> None:
        self.config = config
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0
        self._grpc_port: int | None = config.grpc_port
        self._lock = threading.Lock()
        self._stopping = False
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.config.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def grpc_port(self) -> int | None:
        return self._grpc_port

    @property
    def returncode(self) -> int | None:
        """None while the child runs (or before it was started); its exit code after."""
        return None if self._proc is None else self._proc.poll()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def environment(self) -> dict[str, str]:
        """The child's environment: ours, then the Qdrant settings, then ``extra_env``."""
        storage = self.config.storage_path.resolve()
        env = dict(os.environ)
        env.update(
            {
                "QDRANT__SERVICE__HOST": HOST,
                "QDRANT__SERVICE__HTTP_PORT": str(self.config.port),
                "QDRANT__SERVICE__GRPC_PORT": str(self._grpc_port),
                "QDRANT__STORAGE__STORAGE_PATH": str(storage),
                "QDRANT__STORAGE__SNAPSHOTS_PATH": str(storage / "snapshots"),
                "QDRANT__STORAGE__OPTIMIZERS__MAX_OPTIMIZATION_THREADS": "1",
                "QDRANT__STORAGE__PERFORMANCE__MAX_SEARCH_THREADS": "4",
                "QDRANT__TELEMETRY_DISABLED": "true",
            }
        )
        env.update(self.config.extra_env)
        return env

    def start(self) -> None:
        """Spawn the child and block until it is ready; on any failure the child is stopped."""
        if self._proc is not None or self._stopping:
            raise RuntimeError("a QdrantProcess can be started only once")
        executable = self._executable()
        _check_port_free(self.config.port)
        if self._grpc_port is None:
            self._grpc_port = _free_port(avoid=self.config.port)
        storage = self.config.storage_path.resolve()
        storage.mkdir(parents=True, exist_ok=True)
        log_path = self.config.log_path.resolve()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self._log_start = self._log.tell()
        self._note(f"starting {executable} (http {self.url}, grpc port {self._grpc_port})")
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - the operator's configured binary
                [executable],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=storage,  # keeps relative paths (./snapshots, ./config) out of our cwd
                env=self.environment(),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._close_log()
            raise QdrantStartError(f"cannot run Qdrant binary {executable}: {exc}") from None
        logger.info(
            "qdrant started: pid=%d url=%s storage=%s log=%s",
            self._proc.pid,
            self.url,
            storage,
            log_path,
        )
        try:
            self._wait_ready()
        except BaseException:  # a timeout, an early exit, or Ctrl+C/SIGTERM while waiting
            self.stop()
            raise
        logger.info("qdrant ready at %s", self.url)

    def watch(self, on_exit: Callable[[int], None], interval: float = 1.0) -> None:
        """Poll the child every ``interval`` seconds from a daemon thread.

        If it exits without ``stop()`` having been called, log an error and call
        ``on_exit(returncode)`` (from the watcher thread), once.
        """
        if self._proc is None:
            raise RuntimeError("start() the process before watching it")
        if self._watcher is not None:
            raise RuntimeError("already watching")
        proc = self._proc

        def run() -> None:
            while not self._watch_stop.wait(interval):
                code = proc.poll()
                if code is None:
                    continue
                with self._lock:
                    if self._stopping:
                        return
                logger.error(
                    "qdrant (pid %d) exited unexpectedly with code %d; last lines of %s:\n%s",
                    proc.pid,
                    code,
                    self.config.log_path,
                    self.log_tail(),
                )
                try:
                    on_exit(code)
                except Exception:
                    logger.exception("qdrant exit callback failed")
                return

        self._watcher = threading.Thread(target=run, name="qdrant-watch", daemon=True)
        self._watcher.start()

    def stop(self) -> int | None:
        """SIGTERM, wait ``stop_grace`` seconds, then SIGKILL. Idempotent.

        Returns the child's exit code (negative: killed by that signal), or None if it was
        never started.
        """
        with self._lock:
            if self._stopping:
                return self.returncode
            self._stopping = True
        self._watch_stop.set()
        proc = self._proc
        try:
            watcher = self._watcher
            if watcher is not None and watcher is not threading.current_thread():
                watcher.join()
            if proc is not None and proc.poll() is None:
                self._signal(proc, signal.SIGTERM)
                try:
                    proc.wait(self.config.stop_grace)
                except subprocess.TimeoutExpired:
                    logger.warning(
                        "qdrant (pid %d) still running %.1f s after SIGTERM; killing it",
                        proc.pid,
                        self.config.stop_grace,
                    )
                    self._signal(proc, signal.SIGKILL)
                    proc.wait()
        except BaseException:  # interrupted (a second Ctrl+C): do not leave it behind
            if proc is not None:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
            raise
        finally:
            if proc is not None and proc.returncode is not None:
                logger.info("qdrant (pid %d) stopped with code %d", proc.pid, proc.returncode)
                self._note(f"stopped (exit code {proc.returncode})")
            self._close_log()
        return self.returncode

    def log_tail(self) -> str:
        """The last lines the child wrote since this start (Qdrant logs no secrets)."""
        try:
            with self.config.log_path.open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(self._log_start, size - LOG_TAIL_BYTES))
                data = fh.read()
        except OSError:
            return "(log file unreadable)"
        lines = data.decode("utf-8", errors="replace").splitlines()
        if len(data) == LOG_TAIL_BYTES and lines:
            lines = lines[1:]  # the first line is probably cut
        return "\n".join(lines[-LOG_TAIL_LINES:]) or "(no output)"

    # -- internals ---------------------------------------------------------------------

    def _executable(self) -> str:
        binary = self.config.binary.expanduser()
        if binary.parent == Path():  # a bare name: look it up on PATH first
            found = shutil.which(str(binary))
            if found is not None:
                return found
        resolved = binary.resolve()
        if not resolved.is_file():
            raise QdrantStartError(f"Qdrant binary {binary} not found (looked at {resolved})")
        if not os.access(resolved, os.X_OK):
            raise QdrantStartError(f"Qdrant binary {resolved} is not executable")
        return str(resolved)

    def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.config.startup_timeout
        paths = list(READY_PATHS)
        while True:
            code = proc.poll()
            if code is not None:
                raise QdrantStartError(
                    f"Qdrant exited with code {code} during startup; "
                    f"last lines of {self.config.log_path}:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QdrantStartError(
                    f"Qdrant did not become ready at {self.url}{paths[0]} within "
                    f"{self.config.startup_timeout:g} s; "
                    f"last lines of {self.config.log_path}:\n{self.log_tail()}"
                )
            status = _http_status(self.config.port, paths[0], min(1.0, max(remaining, 0.05)))
            if status == 200:
                return
            if status == 404 and len(paths) > 1:
                paths.pop(0)  # an older Qdrant without /readyz
                continue
            time.sleep(min(POLL_INTERVAL, max(deadline - time.monotonic(), 0)))

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        if proc.poll() is not None:
            return  # reaped: its pid (and group id) may belong to someone else now
        try:
            os.killpg(proc.pid, sig)  # the child leads its own group: reach any helpers too
        except ProcessLookupError:
            pass
        except PermissionError:
            proc.send_signal(sig)

    def _note(self, text: str) -> None:
        if self._log is None:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._log.write(f"[{stamp}] memory-bridge: qdrant {text}\n".encode())
        self._log.flush()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _http_status(port: int, path: str, timeout: float) -> int | None:
    """GET on loopback (never through an HTTP proxy, no per-poll log line); None if no answer."""
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def _check_port_free(port: int) -> None:
    """Fail early if something already listens there: its health answer would fool us."""
    if not 0 < port < 65536:
        raise QdrantStartError(f"Qdrant port must be between 1 and 65535, not {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            raise QdrantStartError(
                f"port {HOST}:{port} is not available for Qdrant ({exc.strerror}); "
                "is another Qdrant (perhaps left over from an earlier run) still running?"
            ) from None


def _free_port(avoid: int) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port != avoid:
            return port
