"""A fake Memory Gateway: strict about what it receives, scriptable in how it answers.

    gw = FakeGateway()
    gw.set_results([{"id": "m1", "text": "likes tea", "score": 0.9, "raw": {...}}])
    gw.fail("/memories/add", "500")
    ...  # drive the client or the proxy against gw.app (ASGITransport or LoopbackServer)
    assert gw.violations == []
    assert [c.path for c in gw.calls] == ["/memories/search", "/memories/add"]

Every payload is checked field by field against the spec of issue 4 (exact key sets, types,
the `chat:` session prefix, sender ids, roles, epoch-millisecond timestamps, flush only after a
successful add of the same session). A violation is answered with 422 and recorded in
`.violations`, so a test can assert the list stays empty; a call is recorded in `.calls` whether
or not it was valid. Validation runs before any scripted failure, so a failing endpoint still
catches a malformed payload.

Failure modes per endpoint: "401", "500", "timeout" (hang for `hang_seconds`, ending early when
the client goes away or `release()` is called, then answer normally), "invalid_json" (200 with a
body that is not JSON), "wrong_shape" (200 with JSON that has no top-level `results` list).

`remember_adds()` makes it stateful, as a real Gateway is: search then answers (when no results
are scripted) from the turns added before, by scope — `current_chat` the turns whose session is
`chat:<conversation_id>` of the same Gateway user/app/project, `all_user_memory` every turn of
that Gateway user — newest first, at most `top_k`.

State is plain lists and a `threading.Event`, so a test thread may inspect or script the fake
while it serves from a LoopbackServer thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["PATHS", "FailureMode", "FakeGateway", "GatewayCall"]

FailureMode = Literal["401", "500", "timeout", "invalid_json", "wrong_shape"]
SEARCH, ADD, FLUSH = "/memories/search", "/memories/add", "/memories/flush"
PATHS = (SEARCH, ADD, FLUSH)

ASSISTANT_SENDER = "memory-bridge"
SCOPES = frozenset({"current_chat", "resources", "all_user_memory"})
# Epoch milliseconds between 2001 and 5138: rules out seconds and microseconds by mistake.
MS_MIN, MS_MAX = 10**12, 10**14

SEARCH_KEYS = frozenset(
    {"user_id", "user_key", "conversation_id", "query", "scope", "top_k", "app_id", "project_id"}
)
ADD_KEYS = frozenset({"user_id", "user_key", "session_id", "app_id", "project_id", "messages"})
FLUSH_KEYS = frozenset({"user_id", "user_key", "session_id", "app_id", "project_id"})
MESSAGE_KEYS = frozenset({"sender_id", "role", "timestamp", "content"})


@dataclass(frozen=True)
class GatewayCall:
    path: str
    json: Any  # the decoded body, or None when it was not JSON


class FakeGateway:
    def __init__(
        self,
        *,
        user_id: str | None = None,
        user_key: str | None = None,
        hang_seconds: float = 30.0,
    ) -> None:
        """`user_id`/`user_key`, when given, are the only identity accepted (else 401)."""
        self.user_id = user_id
        self.user_key = user_key
        self.hang_seconds = hang_seconds
        self.calls: list[GatewayCall] = []
        self.violations: list[str] = []
        self._failures: dict[str, FailureMode] = {}
        self._results: list[Any] = []
        self._unflushed: set[tuple[str, str, str, str]] = set()  # successful adds
        self._stateful = False
        self._stored: list[tuple[tuple[str, str, str, str], str]] = []  # (identity, text)
        self._release = threading.Event()
        self.app = Starlette(routes=[Route(p, self._handle, methods=["POST"]) for p in PATHS])

    # -- scripting -------------------------------------------------------------------------

    def set_results(self, results: list[Any]) -> None:
        """What search answers with, verbatim (extra fields such as `raw` included)."""
        self._results = list(results)

    def fail(self, path: str, mode: FailureMode | None) -> None:
        """Make `path` ("/memories/add" or just "add") fail in `mode`; None heals it."""
        path = path if path.startswith("/") else f"/memories/{path}"
        if path not in PATHS:
            raise ValueError(f"unknown gateway path {path!r}")
        if mode is None:
            self._failures.pop(path, None)
        else:
            self._failures[path] = mode

    def remember_adds(self) -> None:
        """Answer searches from what was added (until `reset`)."""
        self._stateful = True

    def release(self) -> None:
        """End every current and future "timeout" hang at once."""
        self._release.set()

    def reset(self) -> None:
        self.calls.clear()
        self.violations.clear()
        self._failures.clear()
        self._results = []
        self._unflushed.clear()
        self._stateful = False
        self._stored.clear()
        self._release.clear()

    def payloads(self, path: str) -> list[Any]:
        path = path if path.startswith("/") else f"/memories/{path}"
        return [c.json for c in self.calls if c.path == path]

    # -- serving ---------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        body = await request.body()
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = None
        self.calls.append(GatewayCall(path, payload))

        problems = []
        if not request.headers.get("content-type", "").startswith("application/json"):
            problems.append("content-type must be application/json")
        if not isinstance(payload, dict):
            problems.append("body must be a JSON object")
        else:
            problems += _check(path, payload)
            if path == FLUSH and _identity(payload) not in self._unflushed:
                problems.append("flush without a preceding successful add of this session")
        if problems:
            self.violations += [f"{path}: {p}" for p in problems]
            return JSONResponse({"detail": problems}, status_code=422)

        if (self.user_id is not None and payload["user_id"] != self.user_id) or (
            self.user_key is not None and payload["user_key"] != self.user_key
        ):
            return JSONResponse({"detail": "invalid user credentials"}, status_code=401)

        mode = self._failures.get(path)
        if mode == "timeout" and not await self._hang(request):
            return Response(status_code=504)  # nobody is listening any more
        if mode == "401":
            return JSONResponse({"detail": "invalid user key"}, status_code=401)
        if mode == "500":
            return JSONResponse({"detail": "internal error: stack trace here"}, status_code=500)

        if path == ADD:
            self._unflushed.add(_identity(payload))
            if self._stateful:
                self._stored += [(_identity(payload), m["content"]) for m in payload["messages"]]
        elif path == FLUSH:
            self._unflushed.discard(_identity(payload))
        if mode == "invalid_json":
            return Response(b'{"results": [', media_type="application/json")
        if mode == "wrong_shape":
            return JSONResponse({"data": self._results, "results": {"nested": True}})
        if path == SEARCH:
            if self._stateful and not self._results:
                return JSONResponse({"results": self._recalled(payload)})
            return JSONResponse({"results": self._results})
        return JSONResponse({"status": "ok"})

    def _recalled(self, search: dict[str, Any]) -> list[dict[str, Any]]:
        user = (str(search["user_id"]), str(search["app_id"]), str(search["project_id"]))
        session = f"chat:{search['conversation_id']}"
        everything = "all_user_memory" in search["scope"]
        found = [
            {"id": f"m{i}", "text": text, "session_id": who[3], "score": 0.5}
            for i, (who, text) in enumerate(self._stored)
            if who[:3] == user and (everything or who[3] == session)
        ]
        return found[::-1][: search["top_k"]]

    async def _hang(self, request: Request) -> bool:
        """Wait out `hang_seconds`; False as soon as the client has gone away."""
        deadline = time.monotonic() + self.hang_seconds
        while time.monotonic() < deadline and not self._release.is_set():
            if await request.is_disconnected():
                return False
            await asyncio.sleep(0.02)
        return True


def _identity(p: dict[str, Any]) -> tuple[str, str, str, str]:
    """Which Gateway session a call belongs to: identity, app/project and session id."""
    return (
        str(p.get("user_id")),
        str(p.get("app_id")),
        str(p.get("project_id")),
        str(p.get("session_id")),
    )


# -- validation ------------------------------------------------------------------------------


def _check(path: str, p: dict[str, Any]) -> list[str]:
    expected = {SEARCH: SEARCH_KEYS, ADD: ADD_KEYS, FLUSH: FLUSH_KEYS}[path]
    problems = _keys("body", p, expected)
    for key in ("user_id", "user_key", "app_id", "project_id"):
        problems += _text(key, p.get(key))
    if path == SEARCH:
        problems += _text("conversation_id", p.get("conversation_id"))
        if str(p.get("conversation_id", "")).startswith("chat:"):
            problems.append("conversation_id must be the bare session id, not 'chat:...'")
        problems += _text("query", p.get("query"))
        problems += _scope(p.get("scope"))
        top_k = p.get("top_k")
        if type(top_k) is not int or not 1 <= top_k <= 100:
            problems.append("top_k must be an integer 1-100")
    else:
        session = p.get("session_id")
        if not isinstance(session, str) or not session.startswith("chat:") or session == "chat:":
            problems.append("session_id must be 'chat:<session id>'")
    if path == ADD:
        problems += _messages(p.get("messages"), p.get("user_id"))
    return problems


def _keys(where: str, obj: dict[str, Any], expected: frozenset[str]) -> list[str]:
    missing = sorted(expected - obj.keys())
    extra = sorted(obj.keys() - expected)
    return [f"{where}: missing key {k!r}" for k in missing] + [
        f"{where}: unexpected key {k!r}" for k in extra
    ]


def _text(where: str, value: object) -> list[str]:
    if not isinstance(value, str) or not value.strip():
        return [f"{where} must be a non-empty string"]
    return []


def _scope(value: object) -> list[str]:
    if not isinstance(value, list) or not value:
        return ["scope must be a non-empty array"]
    if not all(isinstance(s, str) and s in SCOPES for s in value):
        return [f"scope entries must be among {sorted(SCOPES)}"]
    if len(set(value)) != len(value):
        return ["scope must not repeat an entry"]
    return []


def _messages(value: object, user_id: object) -> list[str]:
    if not isinstance(value, list) or len(value) != 2:
        return ["messages must be an array of exactly two messages (user, assistant)"]
    problems: list[str] = []
    expected = (("user", user_id), ("assistant", ASSISTANT_SENDER))
    for i, (msg, (role, sender)) in enumerate(zip(value, expected, strict=True)):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            problems.append(f"{where} must be an object")
            continue
        problems += _keys(where, msg, MESSAGE_KEYS)
        if msg.get("role") != role:
            problems.append(f"{where}.role must be {role!r}")
        if msg.get("sender_id") != sender:
            problems.append(f"{where}.sender_id must be {sender!r}")
        problems += _text(f"{where}.content", msg.get("content"))
        ts = msg.get("timestamp")
        if type(ts) is not int or not MS_MIN <= ts < MS_MAX:
            problems.append(f"{where}.timestamp must be positive UTC epoch milliseconds")
    if not problems and value[1]["timestamp"] < value[0]["timestamp"]:
        problems.append("messages timestamps must be non-decreasing")
    return problems
