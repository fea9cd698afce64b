"""The Qdrant child for the life of `serve`: its configuration from settings, the signals
that must unwind the proxy (so the child is stopped on the way out) and what happens when the
child dies."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from memory_bridge.server.qdrant_process import QdrantProcess, QdrantProcessConfig
from memory_bridge.settings import Settings

logger = logging.getLogger(__name__)


def qdrant_config_from(settings: Settings) -> QdrantProcessConfig | None:
    """The child's configuration from settings, or None when ``QDRANT_BINARY`` is unset."""
    if not settings.qdrant_binary.strip():
        return None
    data_dir = settings.memory_bridge_data_dir
    api_key = settings.qdrant_api_key
    return QdrantProcessConfig(
        binary=Path(settings.qdrant_binary.strip()).expanduser(),
        storage_path=settings.qdrant_storage_path or data_dir / "qdrant-server",
        port=settings.qdrant_port,
        log_path=settings.qdrant_log_path or data_dir / "qdrant.log",
        startup_timeout=settings.qdrant_startup_timeout,
        stop_grace=settings.qdrant_stop_grace,
        extra_env={"QDRANT__SERVICE__API_KEY": api_key} if api_key else {},
    )


def stop_proxy(returncode: int) -> None:
    """The default reaction to the child dying: SIGTERM ourselves.

    Inside uvicorn this is a graceful shutdown (in-flight requests and background work
    finish); outside it, :func:`managed_qdrant`'s handler turns it into ``SystemExit(143)``.
    Memory retrieval is a hard failure without Qdrant, so the proxy does not carry on
    degraded; a supervisor (systemd, Docker) restarts both.
    """
    logger.error("stopping the proxy because its Qdrant child exited (code %d)", returncode)
    os.kill(os.getpid(), signal.SIGTERM)


class _Termination:
    """While the child lives, SIGTERM and SIGHUP must unwind the stack, not kill us outright.

    A default SIGTERM would end the process without running ``finally`` blocks and leave
    the child (in its own session) running. uvicorn replaces the SIGTERM handler while it
    serves and, after draining, restores ours and raises the signal again: ours then raises
    ``SystemExit(128 + signum)``, which stops the child on the way out. SIGHUP (terminal
    closed) is turned into SIGTERM so uvicorn drains for it too. Once the child is being
    stopped (``disarm()``), further signals are ignored so they cannot interrupt that.
    Handlers someone else set (or SIG_IGN, e.g. under nohup) are left alone; off the main
    thread nothing is installed.
    """

    def __init__(self) -> None:
        self.armed = True
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        wanted: dict[signal.Signals, Callable[[int, FrameType | None], None]] = {
            signal.SIGTERM: self._on_term
        }
        if hasattr(signal, "SIGHUP"):
            wanted[signal.SIGHUP] = self._on_hup
        for sig, handler in wanted.items():
            if signal.getsignal(sig) is signal.SIG_DFL:
                self._previous[sig] = signal.signal(sig, handler)

    def disarm(self) -> None:
        self.armed = False

    def restore(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            raise SystemExit(128 + signum)

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            signal.raise_signal(signal.SIGTERM)


@contextlib.contextmanager
def managed_qdrant(
    settings: Settings,
    *,
    on_exit: Callable[[int], None] = stop_proxy,
    watch_interval: float = 1.0,
) -> Iterator[str | None]:
    """Run the configured Qdrant child for the duration of the block; yield its URL.

    Yields None (and does nothing) when ``QDRANT_BINARY`` is unset. Raises
    :class:`QdrantStartError` if the child cannot start. While the block runs the child is
    watched; if it dies, ``on_exit(returncode)`` is called from the watcher thread (by
    default :func:`stop_proxy`). Leaving the block, however it is left, stops the child.
    """
    config = qdrant_config_from(settings)
    if config is None:
        yield None
        return
    process = QdrantProcess(config)
    termination = _Termination()
    termination.install()
    try:
        process.start()
        process.watch(on_exit, interval=watch_interval)
        yield process.url
    finally:
        termination.disarm()
        try:
            process.stop()
        finally:
            termination.restore()
