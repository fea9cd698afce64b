"""A fake OpenAI-compatible upstream LLM server that records what it receives.

Serve ``FakeUpstream().app`` with ``tests.support.loopback.LoopbackServer`` and point a client
(or the proxy) at ``<url>/v1``::

    fake = FakeUpstream()
    fake.enqueue(Scenario(content="Hi there"))
    with LoopbackServer(fake.app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
    fake.requests[0].json["messages"]

Endpoints: ``POST /v1/chat/completions`` (JSON or SSE, scripted by ``Scenario``),
``POST /v1/responses`` (the Responses API: a response object or its event stream, scripted by
the same ``Scenario``s, built by ``tests/fakes/responses_api.py``), ``GET``/``DELETE
/v1/responses/{id}`` (``?stream=true`` replays a streamed response's events),
``GET /v1/responses/{id}/input_items``, ``POST /v1/responses/{id}/cancel``, ``GET /v1/models``,
``POST /v1/embeddings`` (deterministic hash-based vectors). Any other path is recorded and
answered with an OpenAI-shaped 404.

Chat completions and responses are answered from one FIFO queue filled by ``enqueue``; when it
is empty,
``responder(request_json)`` is asked (if set), and otherwise the reply is
``DEFAULT_REPLY``.

Mem0's memory-extraction call (system prompt "Memory Extractor", ``response_format``
``json_object``) is recognised and answered apart from that queue, by
``memory_responder(user_texts)`` — the user lines of its "## New Messages" section. The default
(``extract_user_facts``) makes one memory per user line, its text verbatim, so tests know
exactly what gets stored. ``memory_requests`` lists those calls; ``proxied_requests`` lists the
other chat completions (what the proxy forwarded).

Embeddings: ``fake_embedding`` (hash-based, unrelated texts are unrelated vectors) unless the
request's ``model`` starts with ``bow`` — then ``bow_embedding``, a bag-of-words vector whose
cosine similarity grows with shared words, so semantic search behaves plausibly.
``embedding_status`` != 200 fails every embeddings call (with ``embedding_error_body`` if set);
``embedding_delay`` delays each one;
``hold_embeddings()`` makes them wait until ``release_embeddings()`` (or the client leaves).

The server runs in another thread: ``requests``, ``sent_bytes`` and ``cancelled`` are filled
there. Everything a test may look at is recorded *before* the response is sent, so it is
complete once the client has seen the response; ``cancelled`` is the exception (it happens
after the client left) — use ``wait_cancelled()``.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import logging
import math
import re
import struct
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Send

from tests.fakes import responses_api

__all__ = [
    "DEFAULT_REPLY",
    "FakeUpstream",
    "Recorded",
    "Scenario",
    "SimulatedDisconnect",
    "ToolCall",
    "bow_embedding",
    "extract_user_facts",
    "fake_embedding",
    "is_memory_extraction",
]

DEFAULT_REPLY = responses_api.DEFAULT_REPLY
DEFAULT_MODEL = "gpt-4o-mini"
SYSTEM_FINGERPRINT = "fp_fake"


@dataclass(frozen=True)
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes
    json: Any  # parsed body, or None if it was not JSON
    query: str = ""


@dataclass(frozen=True)
class ToolCall:
    """A function tool call the fake model "makes". ``arguments`` may be a JSON string or a
    mapping (serialised compactly). ``id`` defaults to ``call_<n>``."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Scenario:
    """Script for one chat completion.

    Content
      ``content``: the reply text; a string is streamed in word-sized deltas, a sequence of
      strings gives the exact deltas. ``None`` means ``DEFAULT_REPLY`` unless there are tool
      calls. ``reasoning``: ``reasoning_content`` (DeepSeek style), streamed before content.
      ``tool_calls``: streamed OpenAI-style, finish_reason becomes "tool_calls".
      ``finish_reason`` / ``usage`` / ``id``: override the defaults.

    Failure and transport shaping
      ``status`` != 200: reply with that status and ``error_body`` (JSON-able, or raw bytes;
      default: an OpenAI error object), for stream and non-stream requests alike.
      ``headers``: extra response headers. ``delay``: seconds before responding (abandonment
      by the client during the delay is counted in ``FakeUpstream.cancelled``).

    Streaming only
      ``chunk_size``: re-cut the SSE body into pieces of N bytes (splitting lines and UTF-8
      characters), each sent as its own write. By default each SSE event is one piece.
      ``chunk_delay``: seconds to sleep between pieces.
      ``disconnect_after_chunks``: after N pieces, abort the connection (the client sees an
      incomplete chunked body, i.e. ``httpx.RemoteProtocolError``).
      ``omit_done``: leave out ``data: [DONE]`` (Responses: the final ``response.completed``).
      ``raw_sse``: send exactly these bytes as the body instead of generated events (one
      piece, unless ``chunk_size`` is set).
      ``FakeUpstream.sent_bytes`` gets each streamed body as planned before sending: the
      whole body, or the first N pieces with ``disconnect_after_chunks`` (a client that hangs
      up early simply receives less).

    Responses API only
      ``response_status``: how the response ends: "completed" (default), "incomplete"
      (``max_output_tokens``), or "failed" (``response.failed``, no output).
      ``bare_completed``: the final event's response carries an empty ``output`` (as some
      upstreams send it), so a capture has to use the deltas.
      ``echo_input``: the response object echoes the request's ``input`` too (as some
      OpenAI-compatible servers do; OpenAI echoes only ``instructions``).

    Non-streaming shaping (``FakeUpstream.sent_bytes`` gets the JSON body as planned, as above)
      ``chunked_json``: send the JSON body without Content-Length (chunked), cut into
      ``chunk_size`` pieces (one piece by default); ``disconnect_after_chunks`` breaks it off.
      ``gzip_json``: send the JSON body gzip-compressed (Content-Encoding: gzip), with the
      compressed length as Content-Length.
    """

    content: str | Sequence[str] | None = None
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str | Sequence[str] | None = None
    finish_reason: str | None = None
    usage: Mapping[str, int] | None = None
    id: str | None = None
    status: int = 200
    error_body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunk_size: int | None = None
    chunk_delay: float = 0.0
    disconnect_after_chunks: int | None = None
    omit_done: bool = False
    raw_sse: bytes | None = None
    chunked_json: bool = False
    gzip_json: bool = False
    response_status: str | None = None
    bare_completed: bool = False
    echo_input: bool = False


class SimulatedDisconnect(Exception):
    """Raised inside a streaming body to make uvicorn drop the connection mid-response."""


class _QuietSimulatedDisconnect(logging.Filter):
    """Drop uvicorn's "Exception in ASGI application" log for our deliberate aborts."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, SimulatedDisconnect):
                return False
            if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            else:
                break
        return True


logging.getLogger("uvicorn.error").addFilter(_QuietSimulatedDisconnect())


def fake_embedding(text: str, dimensions: int) -> list[float]:
    """Deterministic unit-length vector for ``text`` (values are exact float32s, so the
    "float" and "base64" encodings decode to the same numbers)."""
    raw: list[float] = []
    block = 0
    while len(raw) < dimensions:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        raw.extend((byte - 127.5) / 127.5 for byte in digest)
        block += 1
    vector = raw[:dimensions]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    packed = struct.pack(f"<{dimensions}f", *(v / norm for v in vector))
    return list(struct.unpack(f"<{dimensions}f", packed))


def bow_embedding(text: str, dimensions: int) -> list[float]:
    """Bag-of-words vector: each lower-cased word (punctuation stripped) adds 1 to a
    hash-chosen dimension; unit length. Texts sharing words have a high cosine similarity."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimensions] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    packed = struct.pack(f"<{dimensions}f", *(v / norm for v in vector))
    return list(struct.unpack(f"<{dimensions}f", packed))


def is_memory_extraction(payload: Any) -> bool:
    """Is this chat completion Mem0's memory-extraction call?"""
    if not isinstance(payload, dict):
        return False
    messages = payload.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    fmt = payload.get("response_format")
    return (
        first.get("role") == "system"
        and "Memory Extractor" in str(first.get("content"))
        and isinstance(fmt, dict)
        and fmt.get("type") == "json_object"
    )


def _new_user_texts(payload: Mapping[str, Any]) -> list[str]:
    prompt = str(payload["messages"][-1].get("content") or "")
    section = prompt.split("## New Messages\n", 1)[-1].split("\n\n## ", 1)[0]
    return [line[len("user: ") :] for line in section.splitlines() if line.startswith("user: ")]


def extract_user_facts(user_texts: list[str]) -> Scenario:
    """The default extraction answer: one memory per user text, verbatim."""
    memories = [
        {"id": str(i), "text": text, "attributed_to": "user"}
        for i, text in enumerate(t.strip() for t in user_texts)
        if text
    ]
    return Scenario(content=json.dumps({"memory": memories}, ensure_ascii=False))


def _deltas(text: str | Sequence[str] | None) -> list[str]:
    """Split text into word-sized deltas ("Hello from x" -> ["Hello ", "from ", "x"])."""
    if text is None:
        return []
    if isinstance(text, str):
        return re.findall(r"\S+\s*|\s+", text)
    return list(text)


def _fragments(arguments: str, size: int = 8) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def _sse(payload: Mapping[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def _error_object(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _TrackedStream(StreamingResponse):
    """StreamingResponse that reports when it is cancelled before finishing (client gone)."""

    def __init__(self, content: AsyncIterator[bytes], on_abandon: Callable[[], None], **kw: Any):
        super().__init__(content, **kw)
        self._on_abandon = on_abandon

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except (asyncio.CancelledError, OSError):
            self._on_abandon()
            raise


class FakeUpstream:
    """Fake OpenAI-compatible server. See the module docstring."""

    def __init__(
        self,
        *,
        embedding_dimensions: int = 8,
        models: Sequence[str] = (DEFAULT_MODEL, "text-embedding-3-small"),
    ) -> None:
        self.embedding_dimensions = embedding_dimensions
        self.models = list(models)
        self.created = int(time.time())  # fixed per instance, so replies are reproducible
        self.requests: list[Recorded] = []
        self.sent_bytes: list[bytes] = []
        self.cancelled = 0
        self.responder: Callable[[Any], Scenario | None] | None = None
        self.memory_responder: Callable[[list[str]], Scenario] = extract_user_facts
        self.embedding_status = 200
        self.embedding_error_body: Any = None
        self.embedding_delay = 0.0
        self._embeddings_held = threading.Event()
        self._hold_when: Callable[[Any], bool] | None = None
        self._queue: deque[Scenario] = deque()
        self._cancel_cond = threading.Condition()
        self._ids = 0
        # id -> (response object, its request, its stream events or None): what GET answers.
        self.stored_responses: dict[str, tuple[dict[str, Any], Any, list[bytes] | None]] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/responses/{rid}", self._stored_response, methods=["GET", "DELETE"]),
                Route("/v1/responses/{rid}/input_items", self._input_items, methods=["GET"]),
                Route("/v1/responses/{rid}/cancel", self._cancel, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route(
                    "/{path:path}",
                    self._not_found,
                    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                ),
            ]
        )

    # ---- test-facing API -------------------------------------------------------------

    def enqueue(self, *scenarios: Scenario) -> None:
        """Script the next chat completion(s), first in first out."""
        self._queue.extend(scenarios)

    def reset(self) -> None:
        self._queue.clear()
        self.responder = None  # a test's custom responder must not outlive it
        self.memory_responder = extract_user_facts
        self.embedding_status = 200
        self.embedding_error_body = None
        self.embedding_delay = 0.0
        self._embeddings_held.clear()
        self._hold_when = None
        self.requests.clear()
        self.sent_bytes.clear()
        self.stored_responses.clear()
        with self._cancel_cond:
            self.cancelled = 0

    def wait_cancelled(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until ``cancelled >= count``; False on timeout."""
        with self._cancel_cond:
            return self._cancel_cond.wait_for(lambda: self.cancelled >= count, timeout)

    @property
    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    @property
    def responses_requests(self) -> list[Recorded]:
        """``POST /v1/responses`` requests (what the proxy forwarded)."""
        return [r for r in self.requests if r.path == "/v1/responses" and r.method == "POST"]

    @property
    def memory_requests(self) -> list[Recorded]:
        """Mem0's memory-extraction calls."""
        return [r for r in self.chat_requests if is_memory_extraction(r.json)]

    @property
    def proxied_requests(self) -> list[Recorded]:
        """Chat completions other than Mem0's extraction calls."""
        return [r for r in self.chat_requests if not is_memory_extraction(r.json)]

    @property
    def embedding_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/embeddings"]

    def hold_embeddings(self, when: Callable[[Any], bool] | None = None) -> None:
        """Embeddings requests (those whose JSON body `when` accepts, if given) wait
        (unanswered) until ``release_embeddings()``."""
        self._hold_when = when
        self._embeddings_held.set()

    def release_embeddings(self) -> None:
        self._embeddings_held.clear()

    # ---- plumbing ------------------------------------------------------------------

    def _mark_cancelled(self) -> None:
        with self._cancel_cond:
            self.cancelled += 1
            self._cancel_cond.notify_all()

    async def _record(self, request: Request) -> Recorded:
        body = await request.body()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        recorded = Recorded(
            method=request.method,
            path=request.url.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            json=parsed,
            query=request.url.query,
        )
        self.requests.append(recorded)
        return recorded

    def _next_scenario(self, payload: Any) -> Scenario:
        if self._queue:
            return self._queue.popleft()
        if self.responder is not None:
            scenario = self.responder(payload)
            if scenario is not None:
                return scenario
        return Scenario()

    async def _wait(self, request: Request, seconds: float) -> bool:
        """Sleep, polling for client disconnect. False (and counted) if the client left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            while (remaining := deadline - loop.time()) > 0:
                if await request.is_disconnected():
                    self._mark_cancelled()
                    return False
                await asyncio.sleep(min(0.01, remaining))
        except asyncio.CancelledError:
            self._mark_cancelled()
            raise
        return True

    # ---- endpoints -----------------------------------------------------------------

    async def _not_found(self, request: Request) -> Response:
        await self._record(request)
        message = f"Unknown request URL: {request.method} {request.url.path}"
        return JSONResponse(_error_object(404, message), status_code=404)

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        data = [
            {"id": m, "object": "model", "created": self.created, "owned_by": "fake-upstream"}
            for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _embeddings(self, request: Request) -> Response:
        recorded = await self._record(request)
        if self.embedding_delay and not await self._wait(request, self.embedding_delay):
            return Response(status_code=499)
        hold_when = self._hold_when
        while self._embeddings_held.is_set() and (hold_when is None or hold_when(recorded.json)):
            if not await self._wait(request, 0.01):
                return Response(status_code=499)
        if self.embedding_status != 200:
            error = self.embedding_error_body or _error_object(
                self.embedding_status, "Fake embeddings failure"
            )
            return JSONResponse(error, status_code=self.embedding_status)
        payload = recorded.json if isinstance(recorded.json, dict) else {}
        raw_input = payload.get("input")
        if raw_input is None:
            return JSONResponse(_error_object(400, "'input' is required"), status_code=400)
        if isinstance(raw_input, str) or (
            isinstance(raw_input, list) and raw_input and isinstance(raw_input[0], int)
        ):
            raw_input = [raw_input]  # a single string or a single token list
        texts = [item if isinstance(item, str) else json.dumps(item) for item in raw_input]
        dimensions = int(payload.get("dimensions") or self.embedding_dimensions)
        as_base64 = payload.get("encoding_format") == "base64"
        data = []
        embed = bow_embedding if str(payload.get("model", "")).startswith("bow") else fake_embedding
        for index, text in enumerate(texts):
            vector = embed(text, dimensions)
            embedding: Any = vector
            if as_base64:
                embedding = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(t.split()) for t in texts)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": payload.get("model", "text-embedding-3-small"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _chat_completions(self, request: Request) -> Response:
        recorded = await self._record(request)
        payload = recorded.json if isinstance(recorded.json, dict) else {}
        if is_memory_extraction(payload):
            scenario = self.memory_responder(_new_user_texts(payload))
        else:
            scenario = self._next_scenario(payload)
        headers = {"x-request-id": f"req_fake_{len(self.requests)}", **scenario.headers}

        if scenario.delay and not await self._wait(request, scenario.delay):
            return Response(status_code=499)  # client is gone; nobody reads this

        if scenario.status != 200:
            body = scenario.error_body
            if body is None:
                body = _error_object(scenario.status, f"Fake upstream error {scenario.status}")
            if isinstance(body, bytes):
                return Response(body, scenario.status, headers, media_type="application/json")
            return JSONResponse(body, scenario.status, headers)

        self._ids += 1
        completion_id = scenario.id or f"chatcmpl-fake{self._ids:06d}"
        model = str(payload.get("model") or DEFAULT_MODEL)

        if not payload.get("stream"):
            completion = self._completion(scenario, payload, completion_id, model)
            if scenario.chunked_json or scenario.gzip_json:
                return self._shaped_json(completion, scenario, headers)
            return JSONResponse(completion, headers=headers)

        if scenario.raw_sse is not None:
            pieces = [scenario.raw_sse]
        else:
            pieces = [_sse(e) for e in self._chunks(scenario, payload, completion_id, model)]
            if not scenario.omit_done:
                pieces.append(b"data: [DONE]\n\n")
        return self._event_stream(pieces, scenario, headers)

    def _event_stream(
        self, pieces: list[bytes], scenario: Scenario, headers: dict[str, str]
    ) -> Response:
        if scenario.chunk_size is not None:
            body, size = b"".join(pieces), scenario.chunk_size
            pieces = [body[i : i + size] for i in range(0, len(body), size)]
        self.sent_bytes.append(b"".join(pieces[: scenario.disconnect_after_chunks]))
        return _TrackedStream(
            self._send_pieces(pieces, scenario),
            on_abandon=self._mark_cancelled,
            headers=headers,
            media_type="text/event-stream",
        )

    async def _responses(self, request: Request) -> Response:
        recorded = await self._record(request)
        payload = recorded.json if isinstance(recorded.json, dict) else {}
        scenario = self._next_scenario(payload)
        headers = {"x-request-id": f"req_fake_{len(self.requests)}", **scenario.headers}
        if scenario.delay and not await self._wait(request, scenario.delay):
            return Response(status_code=499)
        if scenario.status != 200:
            body = scenario.error_body
            if body is None:
                body = _error_object(scenario.status, f"Fake upstream error {scenario.status}")
            if isinstance(body, bytes):
                return Response(body, scenario.status, headers, media_type="application/json")
            return JSONResponse(body, scenario.status, headers)
        self._ids += 1
        rid = scenario.id or f"resp_fake{self._ids:06d}"
        status = responses_api.final_status(scenario)
        output = [] if status == "failed" else responses_api.output_items(scenario, self._ids)
        whole = responses_api.response_object(scenario, payload, rid, self.created, status, output)
        if not payload.get("stream"):
            self.stored_responses[rid] = (whole, payload, None)
            if scenario.chunked_json or scenario.gzip_json:
                return self._shaped_json(whole, scenario, headers)
            return JSONResponse(whole, headers=headers)
        if scenario.raw_sse is not None:
            pieces = [scenario.raw_sse]
        else:
            pieces = responses_api.events(scenario, payload, rid, self.created, self._ids)
        self.stored_responses[rid] = (whole, payload, pieces)
        return self._event_stream(pieces, scenario, headers)

    def _known(self, request: Request) -> tuple[str, dict[str, Any], Any, list[bytes] | None]:
        rid = request.path_params["rid"]
        if rid not in self.stored_responses:
            raise KeyError(rid)
        return rid, *self.stored_responses[rid]

    async def _stored_response(self, request: Request) -> Response:
        await self._record(request)
        try:
            rid, whole, _, pieces = self._known(request)
        except KeyError as missing:
            return self._no_response(missing)
        if request.method == "DELETE":
            del self.stored_responses[rid]
            return JSONResponse({"id": rid, "object": "response", "deleted": True})
        if request.query_params.get("stream") == "true" and pieces is not None:
            return self._event_stream(list(pieces), Scenario(), {})
        return JSONResponse(whole)

    async def _input_items(self, request: Request) -> Response:
        await self._record(request)
        try:
            rid, _, payload, _ = self._known(request)
        except KeyError as missing:
            return self._no_response(missing)
        data = responses_api.input_items(payload, rid)
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        listing = {"object": "list", "data": data, "first_id": first, "last_id": last}
        return JSONResponse({**listing, "has_more": False})

    async def _cancel(self, request: Request) -> Response:
        await self._record(request)
        try:
            _, whole, _, _ = self._known(request)
        except KeyError as missing:
            return self._no_response(missing)
        return JSONResponse({**whole, "status": "cancelled"})

    @staticmethod
    def _no_response(missing: KeyError) -> Response:
        message = f"Response with id '{missing.args[0]}' not found."
        return JSONResponse(_error_object(404, message), status_code=404)

    # ---- response building ---------------------------------------------------------

    def _shaped_json(
        self, completion: dict[str, Any], scenario: Scenario, headers: dict[str, str]
    ) -> Response:
        body = json.dumps(completion, separators=(",", ":"), ensure_ascii=False).encode()
        if scenario.gzip_json:
            self.sent_bytes.append(body)
            compressed = gzip.compress(body)
            headers = {**headers, "content-encoding": "gzip"}
            return Response(compressed, headers=headers, media_type="application/json")
        size = scenario.chunk_size or len(body)
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
        self.sent_bytes.append(b"".join(pieces[: scenario.disconnect_after_chunks]))
        return _TrackedStream(
            self._send_pieces(pieces, scenario),
            on_abandon=self._mark_cancelled,
            headers=headers,
            media_type="application/json",
        )

    async def _send_pieces(self, pieces: list[bytes], scenario: Scenario) -> AsyncIterator[bytes]:
        abort_after = scenario.disconnect_after_chunks
        for index, piece in enumerate(pieces):
            if abort_after is not None and index >= abort_after:
                break
            if index and scenario.chunk_delay:
                await asyncio.sleep(scenario.chunk_delay)
            yield piece
            await asyncio.sleep(0)  # let uvicorn write this piece on its own
        if abort_after is not None:
            # Response already started: uvicorn closes the transport without the final
            # zero-length chunk, so the client sees a truncated body.
            raise SimulatedDisconnect(f"simulated disconnect after {abort_after} chunks")

    def _usage(self, scenario: Scenario, payload: Mapping[str, Any]) -> dict[str, int]:
        if scenario.usage is not None:
            return dict(scenario.usage)
        prompt = sum(
            len(m["content"].split())
            for m in payload.get("messages") or []
            if isinstance(m, dict) and isinstance(m.get("content"), str)
        )
        completion = len(_deltas(self._content(scenario))) + len(_deltas(scenario.reasoning))
        completion += sum(len(_fragments(tc.arguments_json())) for tc in scenario.tool_calls)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    @staticmethod
    def _content(scenario: Scenario) -> str | Sequence[str] | None:
        if scenario.content is None and not scenario.tool_calls:
            return DEFAULT_REPLY
        return scenario.content

    @staticmethod
    def _finish_reason(scenario: Scenario) -> str:
        if scenario.finish_reason is not None:
            return scenario.finish_reason
        return "tool_calls" if scenario.tool_calls else "stop"

    @staticmethod
    def _tool_call_id(tool_call: ToolCall, index: int) -> str:
        return tool_call.id or f"call_fake{index}"

    def _completion(
        self, scenario: Scenario, payload: Mapping[str, Any], completion_id: str, model: str
    ) -> dict[str, Any]:
        content = self._content(scenario)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if content is None else "".join(content),
            "refusal": None,
            "annotations": [],
        }
        if scenario.reasoning is not None:
            message["reasoning_content"] = "".join(scenario.reasoning)
        if scenario.tool_calls:
            message["tool_calls"] = [
                {
                    "id": self._tool_call_id(tc, i),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": tc.arguments_json()},
                }
                for i, tc in enumerate(scenario.tool_calls)
            ]
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish_reason(scenario),
                }
            ],
            "usage": self._usage(scenario, payload),
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def _chunks(
        self, scenario: Scenario, payload: Mapping[str, Any], completion_id: str, model: str
    ) -> list[dict[str, Any]]:
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        base = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            out = {**base, "choices": [choice]}
            if include_usage:
                out["usage"] = None
            return out

        content = _deltas(self._content(scenario))
        reasoning = _deltas(scenario.reasoning)
        events: list[dict[str, Any]] = []
        if content or reasoning or not scenario.tool_calls:
            events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        events.extend(chunk({"reasoning_content": piece}) for piece in reasoning)
        events.extend(chunk({"content": piece}) for piece in content)
        for index, tool_call in enumerate(scenario.tool_calls):
            head: dict[str, Any] = {
                "index": index,
                "id": self._tool_call_id(tool_call, index),
                "type": "function",
                "function": {"name": tool_call.name, "arguments": ""},
            }
            first_delta: dict[str, Any] = {"tool_calls": [head]}
            if not events:  # tool-call-only replies carry the role in the first tool delta
                first_delta = {"role": "assistant", "content": None, **first_delta}
            events.append(chunk(first_delta))
            events.extend(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                for fragment in _fragments(tool_call.arguments_json())
            )
        events.append(chunk({}, self._finish_reason(scenario)))
        if include_usage:
            events.append({**base, "choices": [], "usage": self._usage(scenario, payload)})
        return events
