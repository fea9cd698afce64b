"""A Responses reply on its way back to the client: what the proxy added is taken back out, and
the response id is claimed for the token that created it.

The upstream echoes the request in its response object (`instructions`, as OpenAI does; some
compatible servers echo `input` too), so a reply would carry the memory the proxy placed there.
Every response object the client receives — the JSON body, and each event that carries one
(`response.created`, `…in_progress`, `…completed`, `…incomplete`, `…failed`, `…queued`) — gets
the client's own value of each field the proxy changed. Only such an event or body is re-encoded;
every other byte is the upstream's. Chat completions never come here: their bytes are relayed
exactly.

The id of the response is recorded (`storage.response_owners`) before the client can see it, so
the creating token can use it at once and no other token ever can.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from memory_bridge.core.errors import ProxyError, invalid_request
from memory_bridge.storage.response_owners import NO_INSTRUCTIONS, Ownership, ResponseOwners

log = logging.getLogger(__name__)

Body = dict[str, Any]
# The request fields the proxy may change (`context.assemble.assemble_responses`).
_PLACED = ("instructions", "input")
_EVENT_END = re.compile(rb"(\r\n\r\n|\n\n|\r\r)")
# In an event's raw bytes a key is quoted as is; inside a JSON string it would be escaped.
_CARRIES_RESPONSE = b'"response"'


def not_found() -> ProxyError:
    """The one answer for an id that is not the token's: the same whether it exists or not."""
    return ProxyError(404, "invalid_request_error", "No response found with this id.")


@dataclass(frozen=True, slots=True)
class Echo:
    """How to give a response object back. `fields`: the client's own value of each field the
    proxy changed in this request. `kept`: for a response retrieved later, how many characters
    of its echoed `instructions` are the client's (`storage.response_owners.Ownership`).
    `mark`: what to record with a new response's id, for its later retrievals."""

    fields: tuple[tuple[str, Any], ...] = ()
    kept: int | None = None
    mark: int | None = None
    stored: bool = True  # False: the request said `store: false`, there is no id to claim

    @property
    def changes(self) -> bool:
        return bool(self.fields) or self.kept is not None

    def fix(self, response: Body) -> bool:
        """Put the client's values back into `response`; True when anything changed."""
        changed = False
        for key, value in self.fields:
            if key in response and response[key] != value:
                response[key] = value
                changed = True
        if self.kept is not None and "instructions" in response:
            echoed = response["instructions"]
            value = None if self.kept == NO_INSTRUCTIONS else echoed
            if isinstance(echoed, str) and self.kept != NO_INSTRUCTIONS:
                value = echoed[: self.kept]
            if value != echoed:
                response["instructions"] = value
                changed = True
        return changed


def echo_of(client: Body, forwarded: Body | None) -> Echo:
    """The echo to undo for a request the client sent as `client` and the proxy forwarded as
    `forwarded` (None: forwarded as it came, nothing to undo)."""
    stored = client.get("store") is not False
    if forwarded is None:
        return Echo(stored=stored)
    # Placement copies the body and replaces only what it changes.
    fields = tuple((k, client.get(k)) for k in _PLACED if forwarded.get(k) is not client.get(k))
    mark = None
    if any(key == "instructions" for key, _ in fields):
        own = client.get("instructions")
        mark = len(own) if isinstance(own, str) else NO_INSTRUCTIONS
    return Echo(fields, mark=mark, stored=stored)


def referenced_id(body: Body) -> str | None:
    """The stored response a request body continues (`previous_response_id`), if any."""
    value = body.get("previous_response_id")
    if value is not None and not isinstance(value, str):
        raise invalid_request("'previous_response_id' must be a string.")
    return value


class ResponseClaims:
    """The proxy's side of response ownership: checks on the way in, claims on the way out."""

    def __init__(self, owners: ResponseOwners) -> None:
        self.owners = owners
        self._pending: dict[tuple[int, str], asyncio.Future[None]] = {}

    async def owned(self, token_id: int, response_id: str) -> Ownership | None:
        """The token's record of `response_id` (one it is still recording: once written)."""
        pending = self._pending.get((token_id, response_id))
        if pending is not None:
            await asyncio.shield(pending)
        return await self.owners.lookup(token_id, response_id)

    async def check_body(self, token_id: int, body: Body) -> None:
        """A 404 (before anything is forwarded) for a body continuing another's response."""
        referenced = referenced_id(body)
        if referenced is not None and await self.owned(token_id, referenced) is None:
            raise not_found()

    async def whole(self, body: bytes, echo: Echo, claim_for: int | None) -> bytes:
        """A JSON reply fixed by `echo`; its id recorded for `claim_for` when given."""
        if not echo.stored:
            claim_for = None  # nothing the upstream keeps: nothing to record, no write
        if claim_for is None and not echo.changes:
            return body
        data = _load(body)
        if data is None:
            return body
        if claim_for is not None:
            await self._claim(claim_for, data.get("id"), echo)
        return _dump(data) if echo.fix(data) else body

    async def stream(
        self, events: AsyncGenerator[bytes, None], echo: Echo, claim_for: int | None
    ) -> AsyncGenerator[bytes, None]:
        """The relayed event stream with each response object fixed by `echo`; the response's
        id recorded for `claim_for` as soon as an event shows it.

        The record is written beside the stream, not before it: a stream held up by a write
        would leave the upstream's events unread, and a connection that then breaks off loses
        them. Until it is written, this process answers the id's lookups once it is; the
        stream does not end before it is."""
        claim: asyncio.Future[None] | None = None
        if not echo.stored:
            claim_for = None
        try:
            async for piece in events:
                if (claim_for is not None or echo.changes) and _CARRIES_RESPONSE in piece:
                    piece, seen = _fix_events(piece, echo)
                    if claim_for is not None and seen is not None:
                        claim = self._claim_soon(claim_for, seen, echo)
                        claim_for = None
                yield piece
            if claim is not None:
                await asyncio.shield(claim)
        finally:
            await events.aclose()

    def _claim_soon(self, token_id: int, response_id: str, echo: Echo) -> asyncio.Future[None]:
        key = (token_id, response_id)
        task = asyncio.ensure_future(self._claim(token_id, response_id, echo))
        self._pending[key] = task  # also the strong reference that keeps the task alive
        task.add_done_callback(lambda _: self._pending.pop(key, None))
        return task

    async def _claim(self, token_id: int, response_id: object, echo: Echo) -> None:
        if not isinstance(response_id, str):
            return
        try:
            if not await self.owners.record(token_id, response_id, echo.mark):
                log.warning("upstream response id not recordable: no token can use it later")
        except Exception as exc:
            # The reply still goes out; the id stays nobody's (every later use of it: 404).
            log.error("could not record a response's owner: %s", type(exc).__name__)


def _load(raw: bytes) -> Body | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _dump(data: Body) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def _fix_events(piece: bytes, echo: Echo) -> tuple[bytes, str | None]:
    """`piece` (whole events) with each carried response object fixed; the first one's id."""
    seen: str | None = None
    parts = _EVENT_END.split(piece)
    for i in range(0, len(parts), 2):  # the odd parts are the blank lines between events
        if _CARRIES_RESPONSE in parts[i]:
            parts[i], found = _fix_event(parts[i], echo)
            if seen is None:
                seen = found
    return b"".join(parts), seen


def _fix_event(block: bytes, echo: Echo) -> tuple[bytes, str | None]:
    lines = block.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(b"data:")]
    if not at:
        return block, None
    values = [lines[i][5:].rstrip(b"\r\n") for i in at]
    data = _load(b"\n".join(v[1:] if v.startswith(b" ") else v for v in values))
    response = None if data is None else data.get("response")
    if not isinstance(response, dict):
        return block, None
    found = response.get("id")
    seen = found if isinstance(found, str) else None
    if not echo.fix(response):
        return block, seen
    assert data is not None
    # One data line in the last one's place, with its ending (the block's last line may have
    # none: the blank line after it is not part of the block).
    end = lines[at[-1]][5 + len(values[-1]) :]
    lines[at[-1]] = b"data: " + _dump(data) + end
    for i in reversed(at[:-1]):
        del lines[i]
    return b"".join(lines), seen
