"""What the backlog's bound check costs a turn's transaction (events.backlog.past_bound).

    python scripts/bench/backlog_micro.py [--repeat 2000]

On a fresh SQLite file: the bound check (two counts capped at the bounds, one statement) timed
with a few open jobs, then with the token's and everyone's open jobs at the default bounds
(200 and 2,000), then with 20,000 done jobs beside them. Microseconds per check, as run in the
turn's unit of work (a synchronous connection, as the SQLite writer thread holds).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from sqlalchemy import Connection, create_engine, insert

from memory_bridge.events.backlog import Bounds, past_bound
from memory_bridge.storage.db import create_engine as create_async_engine
from memory_bridge.storage.db import create_schema
from memory_bridge.storage.tables import jobs

BOUNDS = Bounds(per_token=200, overall=2_000, coalescible=frozenset({"episodic"}))


def _add(conn: Connection, token_id: int, count: int, status: str, start: int) -> None:
    now = time.time()
    rows = [
        {
            "event_id": f"e{start + i}",
            "consumer": "episodic",
            "token_id": token_id,
            "order_key": f"k{start + i}",
            "status": status,
            "attempts": 0,
            "next_attempt_at": now,
            "created_at": now,
            "updated_at": now,
        }
        for i in range(count)
    ]
    conn.execute(insert(jobs), rows)


def _time(conn: Connection, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        past_bound(conn, 1, BOUNDS)
    return (time.perf_counter() - started) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db.sqlite"
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        asyncio.run(create_schema(engine))
        asyncio.run(engine.dispose())
        sync = create_engine(f"sqlite:///{path}")
        print("| open jobs (token / everyone) | done jobs beside | µs per check |")
        print("|---|---|---|")
        with sync.begin() as conn:
            _add(conn, 1, 5, "pending", 0)
            print(f"| 5 / 5 | 0 | {_time(conn, args.repeat):.1f} |")
            _add(conn, 1, 195, "pending", 10)
            _add(conn, 2, 1_800, "pending", 1_000)
            print(f"| 200 / 2,000 | 0 | {_time(conn, args.repeat):.1f} |")
            _add(conn, 1, 20_000, "done", 10_000)
            print(f"| 200 / 2,000 | 20,000 | {_time(conn, args.repeat):.1f} |")


if __name__ == "__main__":
    main()
