"""What each tenant costs a serving process: `bench_tenants.py` (issue 23, constant cost per
tenant). See that script's docstring for the command line and docs/performance.md for figures.

Per build (the current one, and with `--baseline-src` the one under DIR/src), per stage of N
tokens: tokens are created through the admin API until there are N, each doing one chat turn
with a default memory config (history + episodic memory on the install's default embedder)
through the fake upstream; the episodic job of each turn creates its token's vector shard. Once
every job is done: the serving process's threads (/proc/PID/task), open files (/proc/PID/fd)
and resident memory (VmRSS, with its anonymous and file-backed parts). Then the added latency:
chat turns of random tokens of the stage, interleaved with the same request sent straight to the
fake upstream; `added p50` is the build's p50 minus the direct one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.memorybridge import UPSTREAM_KEY, MemoryBridge, start_memorybridge
from bench.processes import Children, log, start_fake_upstream, terminate

MODEL = "bench-tenants"


@dataclass
class Build:
    name: str
    mb: MemoryBridge
    max_tokens: int
    tokens: list[str] = field(default_factory=list)  # the tenants' service tokens
    grow_seconds: float = 0.0


def process_cost(pid: int) -> dict[str, float]:
    """Threads, open files and memory of one process (not its children)."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM", "Threads"):
            status[name] = int(value.split()[0])
    return {
        "threads": len(list(Path(f"/proc/{pid}/task").iterdir())),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
        "rss_mb": round(status["VmRSS"] / 1024, 1),
        "rss_anon_mb": round(status["RssAnon"] / 1024, 1),
        "rss_file_mb": round(status["RssFile"] / 1024, 1),
        "peak_rss_mb": round(status["VmHWM"] / 1024, 1),
    }


def open_jobs(db: Path) -> int:
    """Jobs not finished yet, read from the build's SQLite file (read-only)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        row = conn.execute(
            "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')"
        ).fetchone()
    return int(row[0])


def wait_jobs(db: Path, at_most: int = 0, limit: float = 3600.0) -> None:
    deadline = time.monotonic() + limit
    while open_jobs(db) > at_most:
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs still open after {limit:.0f} s")
        time.sleep(0.5)


def chat(client: httpx.Client, url: str, key: str, user: str, text: str) -> float:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "user": user}
    started = time.perf_counter()
    reply = client.post(f"{url}/v1/chat/completions", json=body, headers=_auth(key))
    elapsed = time.perf_counter() - started
    if reply.status_code != 200:
        raise RuntimeError(f"chat answered {reply.status_code}: {reply.text[:300]}")
    return elapsed


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def grow(build: Build, db: Path, upstream: str, n: int, concurrency: int) -> None:
    """Tokens created until there are `n`, each with one chat turn; every job done."""
    started = time.perf_counter()
    base = {"llm_base_url": upstream, "llm_api_key": UPSTREAM_KEY}
    with (
        httpx.Client(timeout=120, trust_env=False) as client,
        ThreadPoolExecutor(concurrency) as pool,
    ):
        while len(build.tokens) < n:
            batch = []
            for _ in range(min(50, n - len(build.tokens))):
                i = len(build.tokens)
                made = build.mb.create_token({"name": f"tenant-{i}", **base})
                build.tokens.append(made["token"])
                batch.append((made["token"], i))
            turns = [
                pool.submit(chat, client, build.mb.url, key, f"user-{i}", _said(i))
                for key, i in batch
            ]
            for turn in turns:
                turn.result()
            wait_jobs(db, at_most=200)  # the queue stays short: shards are made as we go
            log(f"{build.name}: {len(build.tokens)} tokens")
        wait_jobs(db)
    build.grow_seconds += time.perf_counter() - started


def _said(i: int) -> str:
    topics = ("jazz", "hiking", "tea", "chess", "rowing", "baking", "maps", "birds")
    return f"I am tenant {i} and I like {topics[i % len(topics)]} on weekends."


def latency(
    builds: list[Build], upstream: str, n: int, requests: int, seed: int
) -> dict[str, list[float]]:
    """Chat turns of random tokens among the first `n` of each build, interleaved with the
    same request sent to the upstream directly; seconds per request, by target."""
    rng = random.Random(seed)  # noqa: S311 - which token asks next, not a secret
    times: dict[str, list[float]] = {"direct": [], **{b.name: [] for b in builds}}
    with httpx.Client(timeout=120, trust_env=False) as client:
        for r in range(requests):
            i = rng.randrange(n)
            text = f"What do I like on weekends? ({r})"
            times["direct"].append(chat(client, upstream, UPSTREAM_KEY, f"user-{i}", text))
            for build in builds:
                key = build.tokens[i]
                times[build.name].append(chat(client, build.mb.url, key, f"user-{i}", text))
    return times


def p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2) if values else float("nan")


def start_build(
    children: Children,
    tmp: Path,
    upstream: str,
    name: str,
    src: Path | None,
    settings: dict[str, str],
) -> tuple[Build, Path]:
    mb = start_memorybridge(children, tmp, upstream, name, src, settings)
    db = tmp / name / "memorybridge-data" / "memory_bridge.db"
    wait_warm(mb.url)
    return Build(name, mb, 0), db


def wait_warm(url: str, limit: float = 180.0) -> None:
    """Until `/ready` says the local model and shards are loaded (a build without `/ready`:
    404, at once); a first request would otherwise load the model inside a search timeout."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/ready", timeout=10, trust_env=False).status_code
        if status != 503:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{url} was not ready after {limit:.0f} s")


def run(args: argparse.Namespace, tmp: Path, children: Children) -> dict[str, Any]:
    upstream, _ = start_fake_upstream(children, tmp)
    settings: dict[str, str] = {}
    if args.max_open_shards is not None:
        settings["VECTOR_MAX_OPEN_SHARDS"] = str(args.max_open_shards)
    current, current_db = start_build(children, tmp, upstream, "current", None, settings)
    current.max_tokens = max(args.tokens)
    builds = [(current, current_db)]
    if args.baseline_src is not None:
        src = args.baseline_src.resolve() / "src"
        base, base_db = start_build(children, tmp, upstream, "baseline", src, {})
        base.max_tokens = args.baseline_max_tokens
        builds.append((base, base_db))
    stages: list[dict[str, Any]] = []
    for n in args.tokens:
        stage: dict[str, Any] = {"tokens": n, "builds": {}}
        measured = []
        for build, db in builds:
            if n > build.max_tokens:
                stage["builds"][build.name] = {"skipped": f"more than {build.max_tokens} tokens"}
                continue
            grow(build, db, upstream, n, args.concurrency)
            time.sleep(2)  # the worker's last commits and the optimizer's checks settle
            stage["builds"][build.name] = {
                **process_cost(build.mb.proc.pid),
                "grow_seconds": round(build.grow_seconds, 1),
            }
            measured.append((build, db))
        times = latency([b for b, _ in measured], upstream, n, args.requests, args.seed)
        stage["p50_ms"] = {name: p50_ms(values) for name, values in times.items()}
        for build, db in measured:
            wait_jobs(db)
            figures = stage["builds"][build.name]
            added = stage["p50_ms"][build.name] - stage["p50_ms"]["direct"]
            figures["added_p50_ms"] = round(added, 2)
            figures["after_latency"] = process_cost(build.mb.proc.pid)
        log(f"stage {n}: {json.dumps(stage)}")
        stages.append(stage)
    return {"stages": stages}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| build | tokens | threads | open files | RSS MiB (anon / file) | added p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for stage in result["stages"]:
        for name, f in stage["builds"].items():
            if "skipped" in f:
                lines.append(f"| {name} | {stage['tokens']} | — | — | {f['skipped']} | — |")
                continue
            rss = f"{f['rss_mb']:.0f} ({f['rss_anon_mb']:.0f} / {f['rss_file_mb']:.0f})"
            lines.append(
                f"| {name} | {stage['tokens']} | {f['threads']} | {f['fds']} | {rss} "
                f"| {f['added_p50_ms']:.2f} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="What each tenant costs a serving process.")
    parser.add_argument(
        "--tokens",
        default="10,200,2000",
        type=lambda v: sorted(int(x) for x in v.split(",")),
        help="token counts of the stages, growing (default 10,200,2000)",
    )
    parser.add_argument("--requests", type=int, default=60, help="latency requests per stage")
    parser.add_argument("--concurrency", type=int, default=4, help="tokens' first turns at once")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument(
        "--max-open-shards", type=int, help="VECTOR_MAX_OPEN_SHARDS of the current build"
    )
    parser.add_argument("--baseline-src", type=Path, help="a source tree to run side by side")
    parser.add_argument(
        "--baseline-max-tokens",
        type=int,
        default=200,
        help="the baseline stops growing here (default 200: a build with a shard open per "
        "token runs ~16 threads per token, and 2,000 tokens would exhaust a default pid_max "
        "of 32,768 for the whole machine)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep-temp", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    tmp = Path(tempfile.mkdtemp(prefix="mb-bench-tenants-"))
    (tmp / "logs").mkdir()
    children = Children(tmp / "logs")
    log(f"temp dir {tmp}")
    started = time.monotonic()
    try:
        result = run(args, tmp, children)
        result["meta"] = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "seconds": round(time.monotonic() - started, 1),
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
            "args": {k: str(v) for k, v in vars(args).items()},
        }
        print(table(result))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=2))
        return 0
    finally:
        children.stop_all()
        if args.keep_temp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
