"""What `bench_proxy.py` measures: its targets (the table's columns) and how many requests of
each kind, from the command line's options."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from bench.memorybridge import MemoryBridge

DELAYS_MS = (0, 200)
CONCURRENCIES = (16, 64)

TARGET_INFO = {
    "direct": "fake upstream, no proxy (baseline)",
    "mb-pass": "MemoryBridge, passthrough token (memory.mode off): no memory layer",
    "mb-fresh": "MemoryBridge, new X-Session-Id per request (history empty), no curated docs",
    "mb-history": "MemoryBridge, one session: 20 stored messages injected per request",
    "mb-memory": "MemoryBridge, curated MEMORY.md + USER.md, history (one session), episodic",
    "litellm": "LiteLLM proxy, 1 worker, no DB, logging reduced",
}


@dataclass
class Plan:
    rounds: int
    requests: int
    duration: float
    warmup: float
    warm_requests: int
    rss_counts: tuple[int, int]
    cpu_counts: tuple[int, int]  # non-streaming, streaming requests for the CPU figures
    # Pause between the latency figures' requests: a user's think time and the LLM's own
    # latency, during which the previous turn's memory work (indexing, Mem0) runs. 0: back to
    # back, where that work runs beside the next request (the worst case).
    think_ms: int = 0


@dataclass
class Target:
    name: str
    url: str
    key: str
    session: str | None
    process: str  # which process serves it, for RSS

    def spec(self) -> dict[str, Any]:
        return {"url": self.url, "key": self.key, "session": self.session}


def memorybridge_targets(mb: MemoryBridge, prefix: str, process: str) -> list[Target]:
    url = f"{mb.url}/v1"
    targets = []
    if mb.passthrough_token:
        targets.append(Target(f"{prefix}-pass", url, mb.passthrough_token, "fresh", process))
    return [
        *targets,
        Target(f"{prefix}-fresh", url, mb.history_token, "fresh", process),
        Target(f"{prefix}-history", url, mb.history_token, "bench-history", process),
        Target(f"{prefix}-memory", url, mb.memory_token, "bench-memory", process),
    ]


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            rounds=1,
            requests=5,
            duration=0.5,
            warmup=0.2,
            warm_requests=8,
            rss_counts=(30, 90),
            cpu_counts=(100, 15),
        )
    else:
        plan = Plan(
            rounds=5,
            requests=200,
            duration=2.0,
            warmup=0.5,
            warm_requests=40,
            rss_counts=(1000, 10000),
            cpu_counts=(2000, 300),
        )
    plan.think_ms = args.think_ms
    if args.rounds:
        plan.rounds = args.rounds
    if args.requests:
        plan.requests = args.requests
    if args.duration:
        plan.duration = args.duration
    if args.rss_requests:
        early, late = (int(v) for v in args.rss_requests.split(","))
        plan.rss_counts = (early, late)
    if args.cpu_requests:
        plain, streams = (int(v) for v in args.cpu_requests.split(","))
        plan.cpu_counts = (plain, streams)
    return plan
