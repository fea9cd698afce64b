"""A streaming response that notices its client leaving, whatever the ASGI server version.

When the client disconnects, the body iterator is cancelled at once (even while it waits on a
silent upstream), and then closed, so the upstream request is abandoned immediately.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import suppress

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class PassthroughStream(StreamingResponse):
    body_iterator: AsyncIterator[bytes]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect)
                with suppress(OSError):  # the client went away mid-write
                    await self.stream_response(send)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                closer = getattr(self.body_iterator, "aclose", None)
                if closer is not None:
                    await closer()
