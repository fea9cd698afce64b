"""How long erasing one end user takes on the embedded engine (issue 13).

    python scripts/bench_erase.py                      # 10,000 of alice's, 10,000 of bob's
    python scripts/bench_erase.py --others 0           # alice alone in the shard
    python scripts/bench_erase.py --memories 10000 --others 50000 --dims 384

A fresh data directory (SQLite + Qdrant Edge) gets one token whose episodic shard holds
`--memories` points of alice (dense vectors of `--dims` plus BM25, one per stored message) and
`--others` points of other users, with the matching log: one `session.appended` event (and its
projected `messages` rows and a finished job) per two of alice's messages, spread over 50
sessions. Then `lifecycle.erase.erase_user` runs once, as the admin endpoint calls it, with
the real runtime (`open_memory_services`), and the wall time is printed: the database transaction
(events, jobs, projections, traces, tombstone, WAL truncation) plus the vector sweep (delete by
filter, then the shard rewritten without her, which copies the other users' points).
Long-term memory (Mem0) is off for the token: its delete is Mem0's own and not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection

from memory_bridge.events import log, queue
from memory_bridge.events.model import EventType, NewEvent, session_aggregate
from memory_bridge.lifecycle.erase import erase_user
from memory_bridge.settings import Settings
from memory_bridge.sources.services import open_memory_services
from memory_bridge.tenancy.config import validate_config
from memory_bridge.vectors.index import PointPayload, VectorPoint, Where

MODEL = "bench-embed"
SESSIONS = 50


def _points(user: str, count: int, dims: int, rng: random.Random) -> list[VectorPoint]:
    return [
        VectorPoint(
            id=str(uuid.uuid4()),
            dense=[rng.random() for _ in range(dims)],
            payload=PointPayload(
                user=user,
                kind="episodic",
                text=f"{user} said thing number {i} about topic {i % 97}",
                session=f"s{i % SESSIONS}",
                event_id=str(uuid.uuid4()),
                created_at=time.time(),
            ),
        )
        for i in range(count)
    ]


def _seed_log(token_id: int, turns: int) -> Callable[[Connection], None]:
    def work(conn: Connection) -> None:
        for i in range(turns):
            session = f"s{i % SESSIONS}"
            payload = {
                "user": "alice",
                "session": session,
                "messages": [
                    {"role": "user", "content": f"alice's message {i}"},
                    {"role": "assistant", "content": f"a reply to message {i}"},
                ],
                "query": f"alice's message {i}",
                "finish_reason": "stop",
            }
            event = NewEvent(
                EventType.SESSION_APPENDED,
                session_aggregate(token_id, "alice", session),
                payload,
                {"request_id": f"{i:08x}", "source": "chat"},
            )
            log.append(conn, token_id, [event])
            queue.enqueue(conn, event.event_id, token_id, event.aggregate_id, ["episodic"])

    return work


async def run(memories: int, others: int, dims: int) -> None:
    rng = random.Random(13)  # noqa: S311 - test vectors, not secrets
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            memory_bridge_data_dir=Path(tmp),
            database_url="",
        )
        runtime = await open_memory_services(settings)
        try:
            config = validate_config({"name": "bench", "llm_base_url": "http://127.0.0.1:9/v1"})
            record, _ = await runtime.tokens.create(config)
            token_id = record.id
            index = runtime.vectors.index(token_id, MODEL, dims)
            for user, count in (("alice", memories), ("bob", others)):
                points = _points(user, count, dims, rng)
                for start in range(0, len(points), 1000):
                    index.upsert(points[start : start + 1000])
            await runtime.db.write(_seed_log(token_id, memories // 2))
            print(
                f"seeded: alice {index.count(Where(user='alice'))} points and {memories // 2} "
                f"turns ({memories} messages), others {index.count(Where(user='bob'))} points, "
                f"dims {dims}"
            )
            started = time.perf_counter()
            erased = await erase_user(runtime, token_id, "alice", request_id="bench")
            elapsed = time.perf_counter() - started
            index = runtime.vectors.index(token_id, MODEL, dims)  # rewritten: open it again
            left, kept = index.count(Where(user="alice")), index.count(Where(user="bob"))
            print(f"erased in {elapsed:.3f} s: {erased.counts}")
            print(f"left of alice: {left} points; bob keeps {kept}")
        finally:
            await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="alice's points")
    parser.add_argument("--others", type=int, default=10_000, help="other users' points")
    parser.add_argument("--dims", type=int, default=384)
    args = parser.parse_args()
    asyncio.run(run(args.memories, args.others, args.dims))


if __name__ == "__main__":
    main()
