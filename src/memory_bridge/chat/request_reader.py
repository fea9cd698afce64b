"""What a chat turn reads off its request before any memory work: the body, parsed strictly
and bounded (in a thread when it is large), and the scope (end user and session) it names."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from memory_bridge.chat.formats import WireFormat
from memory_bridge.core.errors import invalid_request
from memory_bridge.core.turn import DEFAULT_SESSION, TOKEN_WIDE_USER, Scope

log = logging.getLogger("memory_bridge.chat.handler")
T = TypeVar("T")
_MAX_ID = 200


class RequestReader:
    """The body's bounds (`MAX_REQUEST_MESSAGES`, `PARSE_IN_THREAD_BYTES`) and the one-line
    warning per token whose requests name no end user."""

    def __init__(self, max_messages: int, thread_bytes: int) -> None:
        self._max_messages = max_messages
        self._thread_bytes = thread_bytes
        self._warned_no_user: set[int] = set()  # tokens told about, at most one line each

    def warn_no_end_user(self, token_id: int) -> None:
        if token_id in self._warned_no_user:
            return
        self._warned_no_user.add(token_id)
        log.warning(
            "token %d: a request names no end user ('user' or X-User-Id): such requests "
            "share one token-wide memory",
            token_id,
        )

    async def parse(self, wire: WireFormat, raw: bytes) -> dict[str, Any]:
        """The strict parse, in a thread for a large body (however large a legal body is, the
        event loop keeps serving other requests); then the bound on how many items it holds,
        before anything walks them."""
        if wire.items_key == "messages" and raw.count(b'"role"') > 2 * self._max_messages:
            # Every chat message has one "role" key, and the bytes `"role"` hardly occur
            # otherwise (a quote inside a string is escaped): far more of them than messages
            # allowed is refused before the parse, which holds the GIL for its whole length.
            raise self._too_many(wire, f"more than {2 * self._max_messages}")
        body = await self.off_loop(len(raw), partial(wire.parse_body, raw))
        items = body.get(wire.items_key)
        if isinstance(items, list) and len(items) > self._max_messages:
            raise self._too_many(wire, str(len(items)))
        return body

    def _too_many(self, wire: WireFormat, count: str) -> Exception:
        return invalid_request(
            f"'{wire.items_key}' holds {count} items; at most {self._max_messages} "
            "are accepted in one request (MAX_REQUEST_MESSAGES).",
            400,
        )

    async def off_loop(self, size: int, work: Callable[[], T]) -> T:
        if size > self._thread_bytes:
            return await asyncio.to_thread(work)
        return work()

    async def dumps(self, size: int, body: dict[str, Any]) -> bytes:
        """`body` as the bytes forwarded upstream (in a thread when the request was large)."""
        return await self.off_loop(size, partial(_dumps, body))


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode()


def scope_of(token_id: int, body: dict[str, Any], headers: Mapping[str, str]) -> Scope:
    user = body.get("user")
    if user is None:
        user = _utf8(headers.get("x-user-id", TOKEN_WIDE_USER), "X-User-Id")
    elif not isinstance(user, str):
        raise invalid_request("'user' must be a string.")
    session = _utf8(headers.get("x-session-id", DEFAULT_SESSION), "X-Session-Id")
    session = session or DEFAULT_SESSION
    for label, value in (("user", user), ("X-Session-Id", session)):
        if len(value) > _MAX_ID or not value.isprintable():
            raise invalid_request(f"{label} must be at most {_MAX_ID} printable characters.")
    return Scope(token_id=token_id, user=user, session=session)


def _utf8(value: str, label: str) -> str:
    """A header's text as UTF-8, like the body's `user` (the server hands header bytes over as
    latin-1): `X-User-Id: jürgen` is the end user "jürgen"; bytes that are not UTF-8 are a 400,
    never a second spelling of someone."""
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:  # already text beyond latin-1: not from the wire
        return value
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_request(f"{label} must be UTF-8 text.", 400) from None
