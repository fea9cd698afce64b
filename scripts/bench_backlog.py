"""The memory backlog under load (issue 23): pending jobs over time, drain time after the load.

    python scripts/bench_backlog.py                                 # c=50 for 60 s, this tree
    python scripts/bench_backlog.py --baseline-src /tmp/base        # then the same on another tree

A `memory-bridge serve` (SQLite, embedded vectors, the in-process worker, the packaged local
embedder where the `local` extra is installed) and the benchmark's fast fake upstream run as
child processes. The load generator drives a closed loop of `--concurrency` workers for
`--duration` seconds against a token with curated memory, history and episodic memory (every
request a new session); every `--sample` seconds the token's queue is read through the admin
API (open jobs by status, the oldest's age); after the load, until the queue is empty (or
`--drain-limit`). With `--baseline-src`, a second build from that tree is measured the same way
right after (one at a time: two loads at once would share the 2 cores). Prints Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.memorybridge import MemoryBridge, start_memorybridge
from bench.probes import MemoryProbe
from bench.processes import Children, start_fake_upstream
from bench.proxy.driver import start_loadgen

OPEN = ("pending", "coalesced", "running")


@dataclass
class Sample:
    at: float  # seconds since the load began
    statuses: dict[str, int]
    oldest: float | None

    @property
    def open(self) -> int:
        return sum(self.statuses.get(s, 0) for s in OPEN)


@dataclass
class Outcome:
    build: str
    load: dict[str, Any] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    drained_after: float | None = None  # seconds from the load's end to an empty queue
    cpu_load: float = 0.0
    cpu_drain: float = 0.0


def _sample(mb: MemoryBridge, token_id: int, began: float) -> Sample:
    summary = mb.admin_call("GET", f"/tokens/{token_id}/jobs").json()
    statuses: dict[str, int] = {}
    for counts in summary.get("consumers", {}).values():
        for status, n in counts.items():
            statuses[status] = statuses.get(status, 0) + n
    return Sample(time.monotonic() - began, statuses, summary.get("oldest_pending_age_seconds"))


def _watch(
    mb: MemoryBridge, token_id: int, began: float, every: float, stop: threading.Event
) -> list[Sample]:
    seen: list[Sample] = []
    while not stop.wait(every):
        seen.append(_sample(mb, token_id, began))
    return seen


def _until_ready(mb: MemoryBridge) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while httpx.get(f"{mb.url}/ready", timeout=30, trust_env=False).status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("memory-bridge never became ready")
        time.sleep(0.2)


def measure(
    args: argparse.Namespace, children: Children, tmp: Path, upstream: str, build: str
) -> Outcome:
    src = None if build.startswith("mb") else Path(args.baseline_src).resolve() / "src"
    mb = start_memorybridge(children, tmp, upstream, f"memorybridge-{build}", src)
    _until_ready(mb)
    token_id = mb.token_ids[-1]  # the memory token: curated + history + episodic
    gen = start_loadgen(children, tmp, "raw")
    target = {"url": f"{mb.url}/v1", "key": mb.memory_token, "session": "fresh"}
    gen.call(cmd="targets", targets={build: target})
    checked = gen.call(cmd="check", target=build, stream=False)
    if not checked.get("ok"):
        raise RuntimeError(f"{build}: {checked}")
    mb.drain_jobs()  # the check's own job
    probe = MemoryProbe(mb.proc.pid)
    out = Outcome(build)
    stop = threading.Event()
    began = time.monotonic()
    watched: list[Sample] = []
    watcher = threading.Thread(
        target=lambda: watched.extend(_watch(mb, token_id, began, args.sample, stop))
    )
    cpu0 = probe.cpu_seconds()
    watcher.start()
    out.load = gen.call(
        cmd="throughput",
        target=build,
        concurrency=args.concurrency,
        delay_ms=0,
        duration=args.duration,
        warmup=0,
    )
    ended = time.monotonic()
    cpu1 = probe.cpu_seconds()
    while time.monotonic() - ended < args.drain_limit:
        if _sample(mb, token_id, began).open == 0:
            out.drained_after = time.monotonic() - ended
            break
        time.sleep(0.5)
    out.cpu_load, out.cpu_drain = cpu1 - cpu0, probe.cpu_seconds() - cpu1
    stop.set()
    watcher.join()
    out.samples = watched
    gen.close()
    _stop(mb)  # the next build's load has the machine to itself
    return out


def _stop(mb: MemoryBridge) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(mb.proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        mb.proc.wait(60)


def _peak(samples: list[Sample], status: str | None = None) -> int:
    return max(
        (s.open if status is None else s.statuses.get(status, 0) for s in samples), default=0
    )


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    print(
        f"\nc={args.concurrency} for {args.duration:.0f} s, 0 ms upstream, "
        "every request a new session\n"
    )
    print(
        "| build | turns/s | errors | open jobs at the load's end (peak) | coalesced peak "
        "| oldest open job at the load's end | drained after the load | CPU s: load / drain |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for o in outcomes:
        during = [s for s in o.samples if s.at <= args.duration + args.sample / 2]
        last = during[-1] if during else None
        drained = "not within the limit" if o.drained_after is None else f"{o.drained_after:.0f} s"
        oldest = "-" if last is None or last.oldest is None else f"{last.oldest:.0f} s"
        print(
            f"| {o.build} | {o.load.get('rps', 0):.1f} | {o.load.get('errors', 0)} "
            f"| {last.open if last else 0} ({_peak(o.samples)}) | {_peak(o.samples, 'coalesced')} "
            f"| {oldest} | {drained} | {o.cpu_load:.0f} / {o.cpu_drain:.0f} |"
        )
    print("\nOpen jobs over time (seconds since the load began):\n")
    times = sorted({round(s.at / args.sample) * args.sample for o in outcomes for s in o.samples})
    print("| t (s) | " + " | ".join(o.build for o in outcomes) + " |")
    print("|---|" + "---|" * len(outcomes))
    for t in times[:: max(1, len(times) // 30)]:
        cells = []
        for o in outcomes:
            near = [s for s in o.samples if abs(s.at - t) < args.sample / 2]
            cells.append(str(near[0].open) if near else "")
        print(f"| {t:.0f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--sample", type=float, default=5.0)
    parser.add_argument("--drain-limit", type=float, default=900.0)
    parser.add_argument("--baseline-src", default="")
    parser.add_argument("--base-first", action="store_true", help="measure the baseline first")
    parser.add_argument(
        "--batch-runs",
        type=lambda v: [int(n) for n in v.split(",")],
        default=[],
        help="JOB_BATCH_RUNS values to measure this tree with, one build each (e.g. 1,2)",
    )
    args = parser.parse_args()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="mb-backlog-") as raw_tmp:
        tmp = Path(raw_tmp)
        children = Children(logs=tmp)
        try:
            upstream, _ = start_fake_upstream(children, tmp)
            builds = [f"mb-runs{n}" for n in args.batch_runs] or ["mb"]
            order = [*builds, *(["base"] if args.baseline_src else [])]
            if args.base_first:
                order = order[-1:] + order[:-1]
            for build in order:
                if build.startswith("mb-runs"):  # this tree's JOB_BATCH_RUNS, in the child's env
                    os.environ["JOB_BATCH_RUNS"] = build.removeprefix("mb-runs")
                outcomes.append(measure(args, children, tmp, upstream, build))
                print(f"{build} measured", file=sys.stderr, flush=True)
        finally:
            children.stop_all()
    report(outcomes, args)


if __name__ == "__main__":
    main()
