"""A minimal fake Memory Gateway for the benchmarks, run as its own process.

    python scripts/bench/fake_gateway.py --port 9200 [--hits 3]

The wire format of `tests/fakes/gateway.py` (issue 4), without its validation:

- `POST /memories/search` answers `{"results": [...]}` with `--hits` items (`id`, `text`,
  `score`, `source_scope`) picked from a fixed pool of notes by a hash of the request's `query`:
  a new query (the latest user text) gets other hits, the same query always the same ones, so
  two builds driven through the same conversation are given the same recall.
- `POST /memories/add` and `POST /memories/flush` answer `{"status": "ok"}`.
- `GET /health`; `GET /_calls`: how many calls each path has had.

A bare ASGI app under uvicorn, like `fake_upstream.py` (whose helpers it uses).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
from typing import Any

from fake_upstream import Receive, Scope, Send, read_body, respond

TOPICS = (
    ("the ingestion service", "moved from cron jobs to the event queue in March"),
    ("the nightly export", "writes Parquet files partitioned by day since version 2.3"),
    ("the billing report", "is reconciled against the ledger every Monday morning"),
    ("the staging database", "is refreshed from an anonymised production snapshot weekly"),
    ("the alerting rules", "page the on-call engineer only for customer-facing errors"),
    ("the schema registry", "rejects breaking changes unless a migration note is attached"),
    ("the search index", "is rebuilt from scratch when the analyser configuration changes"),
    ("the data retention policy", "keeps raw events for 90 days and aggregates for 2 years"),
    ("the feature flags", "are cleaned up at the end of every quarter by their owners"),
    ("the load tests", "run against a copy of staging before each major release"),
    ("the API gateway", "rate-limits anonymous clients to 60 requests per minute"),
    ("the dashboard queries", "must finish within 5 seconds on the shared warehouse"),
)
SCOPES = ("current_chat", "resources")
POOL = tuple(
    f"Project note {i + 1}: {subject} {fact}; decided with the platform team after review."
    for i, (subject, fact) in enumerate(TOPICS)
)

calls: dict[str, int] = {"search": 0, "add": 0, "flush": 0}
hits_per_search = 3


def search_results(query: str, hits: int) -> list[dict[str, Any]]:
    """`hits` distinct notes and scores chosen from `query` (deterministic)."""
    digest = hashlib.sha256(query.encode()).digest()
    chosen: list[int] = []
    for byte in digest:
        index = byte % len(POOL)
        if index not in chosen:
            chosen.append(index)
        if len(chosen) == min(hits, len(POOL)):
            break
    return [
        {
            "id": f"gw-{index + 1}",
            "text": POOL[index],
            "score": round(0.92 - 0.07 * rank - digest[rank] / 2550, 3),
            "source_scope": SCOPES[index % len(SCOPES)],
        }
        for rank, index in enumerate(chosen)
    ]


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
    operation = path.removeprefix("/memories/")
    if scope["method"] == "POST" and operation in calls:
        calls[operation] += 1
        try:
            payload = json.loads(await read_body(receive))
        except ValueError:
            await respond(send, 422, b'{"detail":"body must be JSON"}')
            return
        if operation == "search":
            results = search_results(str(payload.get("query", "")), hits_per_search)
            await respond(send, 200, json.dumps({"results": results}).encode())
        else:
            await respond(send, 200, b'{"status":"ok"}')
    elif path == "/health":
        await respond(send, 200, b'{"status":"ok"}')
    elif path == "/_calls":
        await respond(send, 200, json.dumps(calls).encode())
    else:
        await respond(send, 404, b'{"detail":"not found"}')


def main() -> None:
    import uvicorn

    global hits_per_search
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hits", type=int, default=3, help="results per search (default 3)")
    args = parser.parse_args()
    hits_per_search = args.hits
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        lifespan="on",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
