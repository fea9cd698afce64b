"""A fake OpenAI-compatible upstream LLM server that records what it receives.

Serve ``FakeUpstream().app`` with ``tests.support.loopback.LoopbackServer`` and point a client
(or the proxy) at ``<url>/v1``::

    fake = FakeUpstream()
    fake.enqueue(Scenario(content="Hi there"))
    with LoopbackServer(fake.app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
    fake.requests[0].json["messages"]

Endpoints, one module per API:
  ``POST /v1/chat/completions`` (`chat`: JSON or SSE, scripted by `Scenario`);
  ``POST /v1/responses`` (`responses`: a response object or its event stream, scripted by the
  same `Scenario`s), ``GET``/``DELETE /v1/responses/{id}`` (``?stream=true`` replays a
  streamed response's events), ``GET /v1/responses/{id}/input_items``,
  ``POST /v1/responses/{id}/cancel``;
  ``POST /v1/embeddings`` (`embeddings`: deterministic vectors); ``GET /v1/models``.
  Any other path is recorded and answered with an OpenAI-shaped 404.

Chat completions and responses are answered from one FIFO queue filled by ``enqueue``; when it
is empty, ``responder(request_json)`` is asked (if set), and otherwise the reply is
``DEFAULT_REPLY``. Mem0's memory-extraction call is answered apart from that queue, by
``memory_responder(user_texts)`` (`extraction`). ``memory_requests`` lists those calls;
``proxied_requests`` lists the other chat completions (what the proxy forwarded).

Embeddings: ``embedding_status`` != 200 fails every embeddings call (with
``embedding_error_body`` if set); ``embedding_delay`` delays each one; ``hold_embeddings()``
makes them wait until ``release_embeddings()`` (or the client leaves).

What a test reads (``requests``, ``sent_bytes``, ``cancelled`` / ``wait_cancelled()``) is kept
by `core.Recorder`; its docstring says when each is complete.
"""

from tests.fakes.upstream.core import Recorded, SimulatedDisconnect
from tests.fakes.upstream.embeddings import bow_embedding, fake_embedding
from tests.fakes.upstream.extraction import extract_user_facts, is_memory_extraction
from tests.fakes.upstream.scenario import DEFAULT_MODEL, DEFAULT_REPLY, Scenario, ToolCall
from tests.fakes.upstream.server import FakeUpstream

__all__ = [
    "DEFAULT_MODEL",
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
