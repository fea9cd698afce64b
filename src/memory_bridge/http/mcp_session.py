"""`/mcp`'s session manager (http/mcp), started when first needed rather than before the server
answers: the MCP SDK takes ~0.4 s to import, a fifth of `serve`'s start-up, and `/health` need
not wait for it. The warm-up starts it (`/ready` waits for it); a request that comes first
starts it itself (docs/decisions.md, "Start-up imports").

This module does not import the SDK nor `http.mcp` (which imports the services that hold
this): the server hands in `load`, which imports them and returns the manager's factory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from starlette.types import Receive, Scope, Send

PATH = "/mcp"


class SessionManager(Protocol):
    """What is used of the SDK's `StreamableHTTPSessionManager`."""

    def run(self) -> AbstractAsyncContextManager[None]: ...

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None: ...


class McpSession:
    """One session manager for the app's lifetime, its `run()` held open by a task of its own
    (entered and left in that task, as the SDK's task group needs) until `close()`."""

    def __init__(self, load: Callable[[], Callable[[], SessionManager]]) -> None:
        self._load = load
        self._lock = asyncio.Lock()
        self._manager: SessionManager | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._closed = False

    @property
    def started(self) -> bool:
        return self._manager is not None

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager or await self.start()
        await manager.handle_request(scope, receive, send)

    async def start(self) -> SessionManager:
        """The running manager; started (once) by the first caller, the others wait for it."""
        async with self._lock:
            if self._manager is None:
                if self._closed:
                    raise RuntimeError("the MCP session manager is closed")
                # The import in a thread: the event loop keeps serving meanwhile. The manager
                # itself is made here, on the loop (it makes the SDK's locks).
                create = await asyncio.to_thread(self._load)
                manager = create()
                running: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._task = asyncio.create_task(self._run(manager, running), name="mcp")
                await running  # what run() raised on entry, if anything
                self._manager = manager
            return self._manager

    async def _run(self, manager: SessionManager, running: asyncio.Future[None]) -> None:
        try:
            async with manager.run():
                if not running.done():
                    running.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if running.done():
                raise
            running.set_exception(exc)

    async def close(self) -> None:
        """Stop the manager (its stateless transports with it); nothing starts it again."""
        async with self._lock:  # a start under way ends first
            self._closed = True
            self._manager = None
            self._stop.set()
            if self._task is not None:
                await self._task
