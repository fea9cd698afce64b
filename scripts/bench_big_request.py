"""Whether one huge legal request stalls everyone else (issue 23).

    python scripts/bench_big_request.py                    # 300,000 tiny messages, once
    python scripts/bench_big_request.py --items 300000 --rounds 3

A `memory-bridge serve` (SQLite, embedded vectors) and the benchmark's fast fake upstream run
as child processes. Token A sends a body of `--items` tiny messages (under MAX_REQUEST_BYTES)
while token B sends small chat completions back to back, and `/health` is polled; printed per
round: A's answer (status, seconds) and the latencies token B and `/health` saw while A's
request was in flight (count, p50, max). Before issue 23 token B waited 1.2-2.2 s; the body is
now parsed in a thread and refused (MAX_REQUEST_MESSAGES) before anything walks its messages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_proxy import (  # the sibling script, found through the path above
    BENCH_DIR,
    Children,
    child_env,
    free_port,
    start_memorybridge,
    wait_ready,
)


def _watch(url: str, headers: dict[str, str], body: bytes, stop: threading.Event) -> list[float]:
    """Latencies of back-to-back requests until `stop` (a GET when there is no body)."""
    seen: list[float] = []
    method = "POST" if body else "GET"
    with httpx.Client(timeout=60, trust_env=False) as client:
        while not stop.is_set():
            started = time.perf_counter()
            reply = client.request(method, url, content=body or None, headers=headers)
            if reply.status_code == 200:
                seen.append(time.perf_counter() - started)
    return seen


def _summary(name: str, seen: list[float]) -> str:
    if not seen:
        return f"{name}: none answered"
    ms = sorted(s * 1000 for s in seen)
    return f"{name}: {len(ms)} answered, p50 {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mb-big-") as raw_tmp:
        tmp = Path(raw_tmp)
        children = Children(logs=tmp)
        try:
            port = free_port()
            upstream = f"http://127.0.0.1:{port}"
            argv = [sys.executable, str(BENCH_DIR / "fake_upstream.py"), "--port", str(port)]
            fake = children.start("fake-upstream", argv, child_env(), tmp)
            wait_ready(f"{upstream}/health", fake, "fake upstream", 30)
            mb = start_memorybridge(children, tmp, upstream)
            _until_ready(mb.url)
            tokens = [
                mb.create_token({"name": name, "llm_base_url": upstream})["token"]
                for name in ("big", "other")
            ]
            chat = f"{mb.url}/v1/chat/completions"
            small = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            messages = [{"role": "user", "content": "x"} for _ in range(args.items)]
            big = json.dumps({"model": "m", "messages": messages}).encode()
            print(f"body of {args.items} messages: {len(big) / 1e6:.1f} MB")
            for n in range(args.rounds):
                stop = threading.Event()
                found: dict[str, list[float]] = {}
                plan = (
                    ("other token", chat, _auth(tokens[1]), small.encode()),
                    ("/health", f"{mb.url}/health", {}, b""),
                )
                watchers = [
                    threading.Thread(target=_record, args=(found, key, url, headers, body, stop))
                    for key, url, headers, body in plan
                ]
                for watcher in watchers:
                    watcher.start()
                time.sleep(0.5)  # the watchers are under way before the big body goes
                started = time.perf_counter()
                reply = httpx.post(chat, content=big, headers=_auth(tokens[0]), timeout=300)
                took = time.perf_counter() - started
                stop.set()
                for watcher in watchers:
                    watcher.join()
                print(f"round {n + 1}: big request {reply.status_code} in {took:.2f} s")
                for key, seen in found.items():
                    print("  " + _summary(key, seen))
        finally:
            children.stop_all()


def _record(
    found: dict[str, list[float]],
    key: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    stop: threading.Event,
) -> None:
    found[key] = _watch(url, headers, body, stop)


def _until_ready(url: str) -> None:
    """`/ready` (the local model loaded at start-up) before anything is measured."""
    deadline = time.monotonic() + 300
    while httpx.get(f"{url}/ready", timeout=30, trust_env=False).status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("memory-bridge never became ready")
        time.sleep(0.2)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


if __name__ == "__main__":
    main()
