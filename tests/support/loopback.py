"""Run an ASGI app under a real uvicorn server on 127.0.0.1, in a background thread.

Usage::

    with LoopbackServer(app) as server:
        httpx.get(f"{server.url}/health")

The listening socket is bound (port 0, OS-chosen) before the thread starts and handed to
uvicorn, so there is no window in which another process can grab the port. The app's
lifespan runs (``lifespan="on"``): a failing startup makes ``start()`` raise.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

__all__ = ["LoopbackServer"]

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


class _ThreadServer(uvicorn.Server):
    """uvicorn server that never touches signal handlers.

    uvicorn >= 0.29 installs handlers in ``capture_signals`` (a context manager around
    ``serve``); the installed version already skips that off the main thread, but we make it
    explicit so a future change cannot hijack pytest's Ctrl+C handling.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LoopbackServer:
    """A real HTTP server for ``app`` on ``127.0.0.1:<free port>``.

    ``start()`` returns the base URL and blocks until the server is listening. ``stop()``
    asks uvicorn to exit gracefully and joins the thread. An instance can be started again
    after it was stopped (it gets a new port).

    Extra keyword arguments go to ``uvicorn.Config`` (e.g. ``http="h11"``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        log_level: str = "warning",
        timeout_graceful_shutdown: int = 3,
        **config_kwargs: Any,
    ) -> None:
        self.app = app
        self.log_level = log_level
        self.timeout_graceful_shutdown = timeout_graceful_shutdown
        self.config_kwargs = config_kwargs
        self._server: _ThreadServer | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321`` (no trailing slash)."""
        if self._url is None:
            raise RuntimeError("LoopbackServer is not running")
        return self._url

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> str:
        if self._thread is not None:
            raise RuntimeError("LoopbackServer already started")

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
        except BaseException:
            sock.close()
            raise
        port = sock.getsockname()[1]

        config = uvicorn.Config(
            self.app,
            lifespan="on",
            log_level=self.log_level,
            log_config=None,  # leave logging configuration to pytest
            timeout_graceful_shutdown=self.timeout_graceful_shutdown,
            **self.config_kwargs,
        )
        server = _ThreadServer(config)
        self._server = server
        self._error = None

        def run() -> None:
            try:
                server.run(sockets=[sock])
            except BaseException as exc:  # includes SystemExit on lifespan startup failure
                self._error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name=f"loopback-uvicorn-{port}", daemon=True)
        self._thread.start()

        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not self._thread.is_alive():
                self._thread = None
                self._server = None
                raise RuntimeError(f"uvicorn failed to start: {self._error!r}") from self._error
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"uvicorn did not start within {START_TIMEOUT}s")
            time.sleep(0.005)

        self._url = f"http://127.0.0.1:{port}"
        return self._url

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        self._url = None
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(STOP_TIMEOUT)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        if thread.is_alive():
            raise RuntimeError("uvicorn thread did not exit")
        if self._error is not None and not isinstance(self._error, SystemExit):
            raise RuntimeError(f"uvicorn exited with an error: {self._error!r}") from self._error

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
