"""`FakeUpstream`: the routes, the scripted queue and the knobs a test turns; the bodies come
from one module per API (chat, responses, embeddings, extraction), the recording and wire
shaping from `core`."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.upstream import chat, responses
from tests.fakes.upstream.core import Recorded, Recorder, error_object, error_reply
from tests.fakes.upstream.embeddings import embedding_list
from tests.fakes.upstream.extraction import (
    extract_user_facts,
    is_memory_extraction,
    new_user_texts,
)
from tests.fakes.upstream.scenario import DEFAULT_MODEL, Scenario

# The answers a test may look up again: id -> (response object, its request, its stream events
# or None when it was not streamed).
Stored = tuple[dict[str, Any], Any, list[bytes] | None]


class FakeUpstream(Recorder):
    """Fake OpenAI-compatible server. See the package docstring."""

    def __init__(
        self,
        *,
        embedding_dimensions: int = 8,
        models: Sequence[str] = (DEFAULT_MODEL, "text-embedding-3-small"),
    ) -> None:
        super().__init__()
        self.embedding_dimensions = embedding_dimensions
        self.models = list(models)
        self.created = int(time.time())  # fixed per instance, so replies are reproducible
        self.stored_responses: dict[str, Stored] = {}
        self._queue: deque[Scenario] = deque()
        self._ids = 0
        self._embeddings_held = threading.Event()
        self.reset()
        any_method = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/responses/{rid}", self._stored_response, methods=["GET", "DELETE"]),
                Route("/v1/responses/{rid}/input_items", self._input_items, methods=["GET"]),
                Route("/v1/responses/{rid}/cancel", self._cancel, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/{path:path}", self._not_found, methods=any_method),
            ]
        )

    # ---- test-facing API -------------------------------------------------------------

    def enqueue(self, *scenarios: Scenario) -> None:
        """Script the next chat completion(s) or response(s), first in first out."""
        self._queue.extend(scenarios)

    def reset(self) -> None:
        super().reset()
        self._queue.clear()
        self.responder: Callable[[Any], Scenario | None] | None = None
        self.memory_responder: Callable[[list[str]], Scenario] = extract_user_facts
        self.embedding_status = 200
        self.embedding_error_body: Any = None
        self.embedding_delay = 0.0
        self._embeddings_held.clear()
        self._hold_when: Callable[[Any], bool] | None = None
        self.stored_responses.clear()

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

    # ---- scripted answers: chat completions and responses ----------------------------

    def _next_scenario(self, payload: Any) -> Scenario:
        if self._queue:
            return self._queue.popleft()
        if self.responder is not None:
            scenario = self.responder(payload)
            if scenario is not None:
                return scenario
        return Scenario()

    async def _script(
        self, request: Request, pick: Callable[[dict[str, Any]], Scenario]
    ) -> tuple[dict[str, Any], Scenario, dict[str, str], Response | None]:
        """Record the request and pick its scenario; the last item is the whole answer when
        the scenario ends it early (the client left during ``delay``, or a ``status``)."""
        recorded = await self._record(request)
        payload = recorded.json if isinstance(recorded.json, dict) else {}
        scenario = pick(payload)
        headers = {"x-request-id": f"req_fake_{len(self.requests)}", **scenario.headers}
        early: Response | None = None
        if scenario.delay and not await self._wait(request, scenario.delay):
            early = Response(status_code=499)  # client is gone; nobody reads this
        elif scenario.status != 200:
            early = error_reply(scenario, headers)
        return payload, scenario, headers, early

    def _chat_scenario(self, payload: dict[str, Any]) -> Scenario:
        if is_memory_extraction(payload):
            return self.memory_responder(new_user_texts(payload))
        return self._next_scenario(payload)

    async def _chat_completions(self, request: Request) -> Response:
        payload, scenario, headers, early = await self._script(request, self._chat_scenario)
        if early is not None:
            return early
        self._ids += 1
        completion_id = scenario.id or f"chatcmpl-fake{self._ids:06d}"
        head = (completion_id, self.created, str(payload.get("model") or DEFAULT_MODEL))
        if not payload.get("stream"):
            return self._json(chat.completion(scenario, payload, *head), scenario, headers)
        if scenario.raw_sse is not None:
            pieces = [scenario.raw_sse]
        else:
            pieces = [chat.sse(e) for e in chat.chunks(scenario, payload, *head)]
            if not scenario.omit_done:
                pieces.append(b"data: [DONE]\n\n")
        return self._stream(pieces, scenario, headers, "text/event-stream")

    async def _responses(self, request: Request) -> Response:
        payload, scenario, headers, early = await self._script(request, self._next_scenario)
        if early is not None:
            return early
        self._ids += 1
        rid = scenario.id or f"resp_fake{self._ids:06d}"
        status = responses.final_status(scenario)
        output = [] if status == "failed" else responses.output_items(scenario, self._ids)
        whole = responses.response_object(scenario, payload, rid, self.created, status, output)
        if not payload.get("stream"):
            self.stored_responses[rid] = (whole, payload, None)
            return self._json(whole, scenario, headers)
        if scenario.raw_sse is not None:
            pieces = [scenario.raw_sse]
        else:
            pieces = responses.events(scenario, payload, rid, self.created, self._ids)
        self.stored_responses[rid] = (whole, payload, pieces)
        return self._stream(pieces, scenario, headers, "text/event-stream")

    # ---- stored responses --------------------------------------------------------------

    async def _stored(self, request: Request) -> tuple[str, Stored | None]:
        await self._record(request)
        rid = request.path_params["rid"]
        return rid, self.stored_responses.get(rid)

    @staticmethod
    def _no_response(rid: str) -> Response:
        message = f"Response with id '{rid}' not found."
        return JSONResponse(error_object(404, message), status_code=404)

    async def _stored_response(self, request: Request) -> Response:
        rid, stored = await self._stored(request)
        if stored is None:
            return self._no_response(rid)
        whole, _, pieces = stored
        if request.method == "DELETE":
            del self.stored_responses[rid]
            return JSONResponse({"id": rid, "object": "response", "deleted": True})
        if request.query_params.get("stream") == "true" and pieces is not None:
            return self._stream(list(pieces), Scenario(), {}, "text/event-stream")
        return JSONResponse(whole)

    async def _input_items(self, request: Request) -> Response:
        rid, stored = await self._stored(request)
        if stored is None:
            return self._no_response(rid)
        data = responses.input_items(stored[1], rid)
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        listing = {"object": "list", "data": data, "first_id": first, "last_id": last}
        return JSONResponse({**listing, "has_more": False})

    async def _cancel(self, request: Request) -> Response:
        rid, stored = await self._stored(request)
        if stored is None:
            return self._no_response(rid)
        return JSONResponse({**stored[0], "status": "cancelled"})

    # ---- embeddings, models, anything else -------------------------------------------

    async def _embeddings_wait(self, request: Request, payload: Any) -> bool:
        """The configured delay and hold; False if the client left meanwhile."""
        if self.embedding_delay and not await self._wait(request, self.embedding_delay):
            return False
        hold_when = self._hold_when
        while self._embeddings_held.is_set() and (hold_when is None or hold_when(payload)):
            if not await self._wait(request, 0.01):
                return False
        return True

    async def _embeddings(self, request: Request) -> Response:
        recorded = await self._record(request)
        if not await self._embeddings_wait(request, recorded.json):
            return Response(status_code=499)
        if self.embedding_status != 200:
            error = self.embedding_error_body or error_object(
                self.embedding_status, "Fake embeddings failure"
            )
            return JSONResponse(error, status_code=self.embedding_status)
        payload = recorded.json if isinstance(recorded.json, dict) else {}
        if payload.get("input") is None:
            return JSONResponse(error_object(400, "'input' is required"), status_code=400)
        return JSONResponse(embedding_list(payload, self.embedding_dimensions))

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        data = [
            {"id": m, "object": "model", "created": self.created, "owned_by": "fake-upstream"}
            for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _not_found(self, request: Request) -> Response:
        await self._record(request)
        message = f"Unknown request URL: {request.method} {request.url.path}"
        return JSONResponse(error_object(404, message), status_code=404)
