"""A stand-in for the Qdrant server binary, to exercise `server.qdrant_process` for real.

Run it as ``python tests/fakes/qdrant_standin.py`` (tests wrap it in a two-line shell script
that ``exec``s it, so it is "a binary" like Qdrant's and gets the signals directly).

It reads what Qdrant reads (``QDRANT__SERVICE__HOST``, ``QDRANT__SERVICE__HTTP_PORT``,
``QDRANT__STORAGE__STORAGE_PATH``), listens on that port and answers ``GET /readyz`` and
``GET /healthz`` with 200 (other paths: 404). On start it writes ``standin-env.json`` into the
storage path: every ``QDRANT__*`` variable it got, its cwd, pid, session id, and where its
stdin/stdout/stderr point.

It logs heavily: ``STANDIN_LOG_RATE`` bytes per second (default 64 KiB), alternating stdout
and stderr, plus one line per request. Everything runs on one asyncio loop and the writes
block, so if its output went to a pipe nobody reads, the whole server (HTTP included) would
stop within about a second. That is the point: a test that sees it keep answering proves
the output is drained.

Behaviour switches (environment):

- ``STANDIN_STARTUP_DELAY=<s>``: answer 503 on health endpoints until then (never ready if
  large).
- ``STANDIN_NO_READYZ=1``: ``/readyz`` is 404, like a Qdrant before 1.5.
- ``STANDIN_IGNORE_SIGTERM=1``: ignore SIGTERM (then only SIGKILL stops it).
- ``STANDIN_EXIT_AFTER=<s>``: crash with exit code 3 after that many seconds.

SIGTERM (not ignored) writes ``standin: shutting down`` and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

CHUNK = 4096


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value else default


def _write(stream: int, text: str) -> None:
    data = text.encode()
    while data:  # blocking writes, on purpose: a full pipe stalls the whole loop
        written = os.write(stream, data)
        data = data[written:]


def _fd_target(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _record_env(storage: Path) -> None:
    storage.mkdir(parents=True, exist_ok=True)
    record = {
        "env": {k: v for k, v in os.environ.items() if k.startswith("QDRANT__")},
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "stdin": _fd_target(0),
        "stdout": _fd_target(1),
        "stderr": _fd_target(2),
    }
    tmp = storage / "standin-env.json.tmp"
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(storage / "standin-env.json")


class Standin:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.ready_after = _env_float("STANDIN_STARTUP_DELAY", 0.0)
        self.no_readyz = os.environ.get("STANDIN_NO_READYZ") == "1"
        self.log_rate = _env_float("STANDIN_LOG_RATE", 65536.0)
        self.requests = 0

    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.ready_after

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                status, body = self.route(method, path)
                self.requests += 1
                _write(1, f"standin: {method} {path} -> {status} (request {self.requests})\n")
                reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\n"
                    f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def route(self, method: str, path: str) -> tuple[int, bytes]:
        if method != "GET" or path not in ("/readyz", "/healthz"):
            return 404, b"not found"
        if path == "/readyz" and self.no_readyz:
            return 404, b"not found"
        if not self.ready():
            return 503, b"starting"
        return 200, b"all shards are ready" if path == "/readyz" else b"healthz check passed"

    async def chatter(self) -> None:
        """``log_rate`` bytes a second, in lines, alternating stdout and stderr."""
        per_tick = max(int(self.log_rate / 16), 80)
        line = "standin: " + "x" * 70 + "\n"
        n = 0
        while True:
            n += 1
            text = f"standin: log burst {n}\n" + line * (per_tick // len(line))
            _write(1 if n % 2 else 2, text)
            await asyncio.sleep(1 / 16)


async def main() -> int:
    host = os.environ.get("QDRANT__SERVICE__HOST", "127.0.0.1")
    port = int(os.environ["QDRANT__SERVICE__HTTP_PORT"])
    storage = Path(os.environ["QDRANT__STORAGE__STORAGE_PATH"])
    _record_env(storage)
    standin = Standin()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()

    def on_sigterm() -> None:
        if os.environ.get("STANDIN_IGNORE_SIGTERM") == "1":
            _write(2, "standin: ignoring SIGTERM\n")
            return
        _write(2, "standin: shutting down\n")
        if not done.done():
            done.set_result(0)

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    exit_after = os.environ.get("STANDIN_EXIT_AFTER")
    if exit_after:

        def crash() -> None:
            _write(2, "standin: fatal: simulated crash\n")
            if not done.done():
                done.set_result(3)

        loop.call_later(float(exit_after), crash)

    server = await asyncio.start_server(standin.handle, host, port)
    _write(1, f"standin: listening on http://{host}:{port}, storage {storage}\n")
    chatter = asyncio.create_task(standin.chatter())
    try:
        return await done
    finally:
        chatter.cancel()
        server.close()


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    os._exit(code)  # do not wait for open client connections
