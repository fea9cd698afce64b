"""The benchmark's load generator, run as its own process and driven over stdin/stdout.

    python scripts/bench/loadgen.py [--client raw|httpx]

Reads one JSON command per line on stdin and answers each with one JSON line on stdout:

- `{"cmd": "targets", "targets": {name: {"url", "key", "session"}}}` — what to call. `session`
  is `null` (no `X-Session-Id`), `"fresh"` (a new id on every request) or a fixed id.
- `{"cmd": "check", "target", "stream"}` — one request, body validated.
- `{"cmd": "latency", "target", "stream", "n", "delay_ms"}` — `n` sequential requests on one
  kept-alive connection (after one untimed warm-up request): per-request total time, time to
  the first body byte, and MemoryBridge's `X-MemoryBridge-Overhead-Ms` when present.
- `{"cmd": "throughput", "target", "concurrency", "delay_ms", "duration", "warmup"}` — a
  closed loop of `concurrency` workers, one connection each, for `warmup + duration` seconds;
  only requests that complete inside the `duration` window are counted.
- `{"cmd": "drive", "target", "n", "concurrency", "stream_every"}` — send `n` requests (every
  `stream_every`-th one streaming) as fast as `concurrency` workers allow.
- `{"cmd": "quit"}`.

The default client (`raw`) is a minimal HTTP/1.1 keep-alive client: an asyncio protocol that
writes pre-built request bytes and parses responses with httptools (which uvicorn[standard]
already installs). Per request it costs a fraction of what an httpx request does, which
matters on a 2-core machine where the load generator competes with the servers it measures.
`--client httpx` uses one `httpx.AsyncClient` per target (HTTP/1.1, pool sized to the
concurrency) instead, as a cross-check.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python scripts/bench/loadgen.py`: find the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load_clients import (
    REQUEST_TIMEOUT,
    Client,
    HttpxClient,
    RawClient,
    Target,
)

_OVERTIME = 30.0  # seconds a throughput worker may run past its window to complete one request

# ---------------------------------------------------------------------------------------------


@dataclass
class LoadGenerator:
    engine: str
    targets: dict[str, Target] = field(default_factory=dict)
    httpx_clients: dict[str, Any] = field(default_factory=dict)

    def client(self, name: str) -> Client:
        target = self.targets[name]
        if self.engine == "raw":
            return RawClient(target)
        shared = self.httpx_clients.get(name)
        if shared is None:
            import httpx

            shared = httpx.AsyncClient(
                http1=True,
                http2=False,
                timeout=REQUEST_TIMEOUT,
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
                trust_env=False,
            )
            self.httpx_clients[name] = shared
        return HttpxClient(target, shared)

    async def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        kind = cmd["cmd"]
        if kind == "targets":
            self.targets = {n: Target.parse(n, s) for n, s in cmd["targets"].items()}
            return {"ok": True, "engine": self.engine}
        if kind == "check":
            return await self.check(cmd["target"], bool(cmd["stream"]))
        if kind == "latency":
            return await self.latency(
                cmd["target"],
                bool(cmd["stream"]),
                int(cmd["n"]),
                int(cmd.get("delay_ms", 0)),
                int(cmd.get("think_ms", 0)),
            )
        if kind == "throughput":
            return await self.throughput(
                cmd["target"],
                int(cmd["concurrency"]),
                int(cmd["delay_ms"]),
                float(cmd["duration"]),
                float(cmd["warmup"]),
            )
        if kind == "drive":
            return await self.drive(
                cmd["target"], int(cmd["n"]), int(cmd["concurrency"]), int(cmd["stream_every"])
            )
        raise ValueError(f"unknown command {kind!r}")

    async def check(self, name: str, stream: bool) -> dict[str, Any]:
        client = self.client(name)
        try:
            out = await client.send(stream, 0, capture=True)
        finally:
            await client.close()
        if not out.ok:
            return {"ok": False, "detail": f"{out.error}: {out.body[:300]!r}"}
        try:
            if stream:
                events = [line for line in out.body.split(b"\n") if line.startswith(b"data:")]
                if not events or events[-1].strip() != b"data: [DONE]":
                    return {"ok": False, "detail": f"stream did not end with [DONE]: {events[-1:]}"}
                text = "".join(
                    (json.loads(e[5:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                    for e in events[:-1]
                )
                return {"ok": True, "detail": f"{len(events)} events, {len(text)} characters"}
            reply = json.loads(out.body)["choices"][0]["message"]["content"]
            return {"ok": True, "detail": f"reply {reply[:40]!r}"}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return {"ok": False, "detail": f"unexpected body ({exc!r}): {out.body[:300]!r}"}

    async def latency(
        self, name: str, stream: bool, n: int, delay_ms: int, think_ms: int = 0
    ) -> dict[str, Any]:
        client = self.client(name)
        total: list[float] = []
        ttfb: list[float] = []
        overhead: list[float] = []
        errors: list[str] = []
        try:
            await client.send(stream, delay_ms)  # untimed: opens the connections on both hops
            for _ in range(n):
                if think_ms:
                    await asyncio.sleep(think_ms / 1000)
                out = await client.send(stream, delay_ms)
                if not out.ok:
                    errors.append(out.error or "?")
                    continue
                total.append(out.total * 1000)
                ttfb.append(out.ttfb * 1000)
                if out.overhead_ms is not None:
                    overhead.append(out.overhead_ms)
        finally:
            await client.close()
        return {
            "total_ms": total,
            "ttfb_ms": ttfb,
            "overhead_ms": overhead,
            "errors": len(errors),
            "error_sample": errors[:3],
        }

    async def throughput(
        self, name: str, concurrency: int, delay_ms: int, duration: float, warmup: float
    ) -> dict[str, Any]:
        """Requests/s of a closed loop, summed over workers.

        Each worker's rate is `k / (end of its last - start of its first)` over the `k`
        back-to-back requests it completed inside the window, not completions per window: with
        a fixed upstream delay the workers complete in bursts, and counting whole bursts in a
        window of a few delay periods would be off by up to one burst (and a worker slower than
        the window would count as zero).
        """
        start = time.perf_counter()
        window = (start + warmup, start + warmup + duration)
        rates: list[float] = []
        counted = 0
        errors: list[str] = []

        async def worker() -> None:
            nonlocal counted
            client = self.client(name)
            spans: list[tuple[float, float]] = []
            try:
                # A worker whose requests outlast the window (a slow target on a busy machine)
                # goes on until it completes one, rather than counting as zero.
                while time.perf_counter() < window[1] or (
                    not spans and time.perf_counter() < window[1] + _OVERTIME
                ):
                    out = await client.send(False, delay_ms)
                    if not out.ok:
                        errors.append(out.error or "?")
                        if len(errors) > 1000:
                            return
                        await asyncio.sleep(0.01)
                    elif window[0] <= out.end and (out.end <= window[1] or not spans):
                        spans.append((out.end - out.total, out.end))
            finally:
                await client.close()
            counted += len(spans)
            if spans:
                rates.append(len(spans) / (spans[-1][1] - spans[0][0]))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return {
            "completed": counted,
            "seconds": duration,
            "rps": sum(rates),
            "errors": len(errors),
            "error_sample": errors[:3],
        }

    async def drive(self, name: str, n: int, concurrency: int, stream_every: int) -> dict[str, Any]:
        issued = itertools.count()
        done = 0
        errors: list[str] = []
        start = time.perf_counter()

        async def worker() -> None:
            nonlocal done
            client = self.client(name)
            try:
                while (i := next(issued)) < n:
                    stream = stream_every > 0 and i % stream_every == stream_every - 1
                    out = await client.send(stream, 0)
                    if out.ok:
                        done += 1
                    else:
                        errors.append(out.error or "?")
            finally:
                await client.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return {
            "completed": done,
            "errors": len(errors),
            "error_sample": errors[:3],
            "seconds": time.perf_counter() - start,
        }

    async def aclose(self) -> None:
        for client in self.httpx_clients.values():
            await client.aclose()


async def serve(engine: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    gen = LoadGenerator(engine)
    try:
        while line := await reader.readline():
            cmd = json.loads(line)
            if cmd.get("cmd") == "quit":
                break
            try:
                reply = await gen.handle(cmd)
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        await gen.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    args = parser.parse_args()
    engine = args.client
    if engine == "raw" and importlib.util.find_spec("httptools") is None:
        print("httptools is not installed; using the httpx client", file=sys.stderr)
        engine = "httpx"
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.run(serve(engine))
    else:
        asyncio.run(serve(engine))


if __name__ == "__main__":
    main()
