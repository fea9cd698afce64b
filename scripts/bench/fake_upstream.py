"""A fast fake OpenAI-compatible upstream for the benchmark, run as its own process.

    python scripts/bench/fake_upstream.py --port 9100

A bare ASGI app (no framework) under uvicorn, one worker, uvloop and httptools when installed,
so the upstream itself costs as little as possible and every proxy is measured against the
same cheap server.

- `POST /v1/chat/completions`: a fixed small JSON reply, or with `"stream": true` an SSE reply
  of `STREAM_CHUNKS` events (a role chunk, content chunks, a finish chunk) and `data: [DONE]`.
- The per-request delay (before the response head, so it delays the first byte too) comes
  from, in order: the `delay_ms` query parameter, the `X-Bench-Delay-Ms` header, or a model
  name containing `delay-<ms>` (e.g. `bench-delay-200`). The model name is the one channel
  every proxy forwards unchanged, so the benchmark uses it.
- `POST /v1/embeddings`: deterministic hash-based vectors (float or base64), for a future
  long-term memory layer's embedder. With a model name containing `bow` (e.g.
  `bench-embed-bow`), bag-of-words vectors instead (each word adds 1 to a hashed dimension),
  whose cosine grows with the words two texts share, so a search ranks related texts first.
- A model name containing `reply-<bytes>` (e.g. `bench-reply-800`) gets a non-streaming reply
  of about that many bytes of text, made from the request's latest message (so each turn's
  reply differs, and the same request always gets the same reply).
- A model whose name starts with `bench-mem0` answers with a JSON object that satisfies both
  of Mem0's LLM calls (`{"facts": [...]}` for extraction, `{"memory": [...]}` for the update
  step), each call a new fact, so chat turns can seed long-term memories (`--with-memory`).
- `GET /v1/models`, `GET /health`, and `GET /bench/stats` (request counters; `mem0` counts the
  `bench-mem0` calls, which `chat` counts too).
- With `FAKE_UPSTREAM_RECORD=1` in its environment, the raw body of the last chat completions
  request of every model (`bench-mem0` calls excepted) is kept, and `GET /_last?model=<name>`
  answers it byte for byte (without `model`: the last of any model; 404 when there is none).
  Off by default, so the latency benchmark pays nothing for it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import importlib.util
import itertools
import json
import os
import re
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

STREAM_CHUNKS = 200  # SSE events per streamed reply, [DONE] included
REPLY_TEXT = "Hello from the benchmark upstream. This reply is short and always the same."
CREATED = 1_700_000_000
_DELAY_IN_MODEL = re.compile(r"delay-(\d+)")
_REPLY_IN_MODEL = re.compile(r"reply-(\d+)")
_REPLY_VOCABULARY = (
    "the plan keeps each step small and checks the result before moving on to the next one "
    "so that a failure is found early and costs little to undo while the rest of the work "
    "carries on with the data already validated by the earlier stages of the pipeline"
)
_REPLY_WORDS = tuple(_REPLY_VOCABULARY.split())
RECORD = os.environ.get("FAKE_UPSTREAM_RECORD") == "1"
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]

stats = {"chat": 0, "stream": 0, "embeddings": 0, "mem0": 0, "other": 0}
_last_bodies: dict[str, bytes] = {}  # model (and "" for any) → raw body; with RECORD only
_fact_ids = itertools.count(1)


def completion_json(model: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY_TEXT, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28},
        },
        separators=(",", ":"),
    ).encode()


def stream_events(model: str) -> list[bytes]:
    """`STREAM_CHUNKS` SSE events: role, content pieces, finish, [DONE]."""

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": f"tok{i} "}) for i in range(STREAM_CHUNKS - 3)]
    events.append(event({}, "stop"))
    events.append(b"data: [DONE]\n\n")
    return events


_completion_cache: dict[str, bytes] = {}
_stream_cache: dict[str, list[bytes]] = {}


def _cached_completion(model: str) -> bytes:
    body = _completion_cache.get(model)
    if body is None:
        body = _completion_cache.setdefault(model, completion_json(model))
    return body


def _cached_stream(model: str) -> list[bytes]:
    events = _stream_cache.get(model)
    if events is None:
        events = _stream_cache.setdefault(model, stream_events(model))
    return events


def mem0_reply(model: str) -> bytes:
    n = next(_fact_ids)
    fact = f"Benchmark fact number {n}: the user likes the colour {n % 97}."
    content = json.dumps(
        {"facts": [fact], "memory": [{"id": str(n), "text": fact, "event": "ADD"}]}
    )
    body = json.loads(completion_json(model))
    body["choices"][0]["message"]["content"] = content
    return json.dumps(body).encode()


def reply_text(seed: str, size: int) -> str:
    """About `size` bytes of plain words, chosen from `seed` (deterministic)."""
    digest = hashlib.sha256(seed.encode()).digest()
    words: list[str] = []
    length, i = 0, 0
    while length < size:
        word = _REPLY_WORDS[(digest[i % len(digest)] + i) % len(_REPLY_WORDS)]
        words.append(word)
        length += len(word) + 1
        i += 1
    return " ".join(words)[:size].rstrip() + "."


def sized_reply(model: str, req: dict[str, Any], size: int) -> bytes:
    messages = req.get("messages")
    seed = json.dumps(messages[-1] if isinstance(messages, list) and messages else "")
    body = json.loads(completion_json(model))
    body["choices"][0]["message"]["content"] = reply_text(seed, size)
    return json.dumps(body, separators=(",", ":")).encode()


def embedding(text: str, dims: int) -> list[float]:
    out: list[float] = []
    counter = 0
    while len(out) < dims:
        block = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 127.5) / 127.5 for b in block)
        counter += 1
    norm = sum(v * v for v in out[:dims]) ** 0.5 or 1.0
    return [v / norm for v in out[:dims]]


def bag_of_words(text: str, dims: int) -> list[float]:
    out = [0.0] * dims
    for word in re.findall(r"\w+", text.casefold()):
        out[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % dims] += 1.0
    norm = sum(v * v for v in out) ** 0.5 or 1.0
    return [v / norm for v in out]


def embeddings_json(req: dict[str, Any]) -> bytes:
    inputs = req.get("input", "")
    texts = [inputs] if isinstance(inputs, str) else [str(i) for i in inputs]
    dims = int(req.get("dimensions") or 64)
    embed = bag_of_words if "bow" in str(req.get("model", "")) else embedding
    data: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        vector = embed(text, dims)
        value: Any = vector
        if req.get("encoding_format") == "base64":
            value = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": value})
    return json.dumps(
        {
            "object": "list",
            "data": data,
            "model": req.get("model", "bench-embed"),
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
    ).encode()


def delay_seconds(scope: Scope, model: str) -> float:
    query = scope.get("query_string", b"")
    if query:
        values = parse_qs(query.decode("latin-1")).get("delay_ms")
        if values:
            return float(values[0]) / 1000
    for name, value in scope["headers"]:
        if name == b"x-bench-delay-ms":
            return float(value) / 1000
    found = _DELAY_IN_MODEL.search(model)
    return int(found.group(1)) / 1000 if found else 0.0


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        return body
    parts = [body]
    while message.get("more_body"):
        message = await receive()
        parts.append(message.get("body", b""))
    return b"".join(parts)


async def respond(send: Send, status: int, body: bytes) -> None:
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def chat(scope: Scope, receive: Receive, send: Send) -> None:
    raw = await read_body(receive)
    try:
        req = json.loads(raw)
    except ValueError:
        await respond(send, 400, b'{"error":{"message":"bad json","type":"invalid_request"}}')
        return
    model = str(req.get("model") or "bench")
    delay = delay_seconds(scope, model)
    if delay > 0:
        await asyncio.sleep(delay)
    if model.startswith("bench-mem0"):
        stats["chat"] += 1
        stats["mem0"] += 1
        await respond(send, 200, mem0_reply(model))
        return
    if RECORD:
        _last_bodies[model] = _last_bodies[""] = raw
    sized = _REPLY_IN_MODEL.search(model)
    if sized and req.get("stream") is not True:
        stats["chat"] += 1
        await respond(send, 200, sized_reply(model, req, int(sized.group(1))))
        return
    if req.get("stream") is True:
        stats["stream"] += 1
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        for event in _cached_stream(model):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    stats["chat"] += 1
    await respond(send, 200, _cached_completion(model))


async def last_body(scope: Scope, send: Send) -> None:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    body = _last_bodies.get(query.get("model", [""])[0])
    if body is None:
        await respond(send, 404, b'{"error":{"message":"nothing recorded","type":"not_found"}}')
    else:
        await respond(send, 200, body)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    method: str = scope["method"]
    if method == "POST" and path.endswith("/chat/completions"):
        await chat(scope, receive, send)
    elif method == "POST" and path.endswith("/embeddings"):
        stats["embeddings"] += 1
        await respond(send, 200, embeddings_json(json.loads(await read_body(receive) or b"{}")))
    elif path == "/health":
        await respond(send, 200, b'{"status":"ok"}')
    elif path == "/bench/stats":
        await respond(send, 200, json.dumps(stats).encode())
    elif RECORD and method == "GET" and path == "/_last":
        await last_body(scope, send)
    elif path.endswith("/models"):
        stats["other"] += 1
        body = {"object": "list", "data": [{"id": "bench", "object": "model", "created": CREATED}]}
        await respond(send, 200, json.dumps(body).encode())
    else:
        stats["other"] += 1
        await respond(send, 404, b'{"error":{"message":"not found","type":"not_found"}}')


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        backlog=2048,
    )


if __name__ == "__main__":
    main()
