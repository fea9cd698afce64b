"""The measurement phases of `bench_proxy.py`, in the order they run: checks, warm-up, memory
(RSS), CPU per request, then interleaved rounds of latency and throughput."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.probes import MemoryProbe
from bench.processes import log
from bench.proxy.driver import LoadGen
from bench.proxy.plan import CONCURRENCIES, DELAYS_MS, Plan, Target
from bench.proxy.stats import Samples, Throughput, percentile

Settle = Callable[[str], None]


def run_checks(gen: LoadGen, targets: list[Target], skipped: dict[str, str]) -> list[Target]:
    usable = []
    for target in targets:
        problems = []
        for stream in (False, True):
            reply = gen.call(cmd="check", target=target.name, stream=stream)
            kind = "stream" if stream else "non-stream"
            if not reply["ok"]:
                problems.append(f"{kind}: {reply['detail']}")
            else:
                log(f"check {target.name} {kind}: {reply['detail']}")
        if problems:
            skipped[target.name] = "; ".join(problems)
            log(f"{target.name} fails its check, left out: {skipped[target.name]}")
        else:
            usable.append(target)
    return usable


def warm_up(
    gen: LoadGen, targets: list[Target], plan: Plan, served: dict[str, int], settle: Settle
) -> None:
    """A few requests per target (every 4th streaming) before anything is measured."""
    for target in targets:
        served[target.process] += 2  # the checks' two requests
        reply = gen.call(
            cmd="drive", target=target.name, n=plan.warm_requests, concurrency=4, stream_every=4
        )
        served[target.process] += plan.warm_requests
        settle(target.name)
        if reply["errors"]:
            log(f"warm-up {target.name}: {reply['errors']} errors {reply['error_sample']}")


def rss_subjects(
    targets: list[Target], probes: dict[str, MemoryProbe]
) -> dict[str, tuple[Target, MemoryProbe]]:
    """Each serving process but the fake upstream, with the first target it serves."""
    subjects = {}
    for target in targets:
        if target.process != "fake-upstream" and target.process not in subjects:
            subjects[target.process] = (target, probes[target.process])
    return subjects


def rss_phase(
    gen: LoadGen,
    subjects: dict[str, tuple[Target, MemoryProbe]],
    served: dict[str, int],
    counts: tuple[int, int],
) -> dict[str, dict[str, Any]]:
    """Drive each proxy to `counts[0]` then `counts[1]` served requests; RSS at each point.

    Concurrency 16, every 10th request streaming, no upstream delay.
    """
    out: dict[str, dict[str, Any]] = {}
    for process, (target, probe) in subjects.items():
        figures: dict[str, Any] = {"driven_through": target.name, "start_mb": probe.rss_mb()}
        for label, count in zip(("early", "late"), counts, strict=True):
            todo = max(0, count - served[process])
            if todo:
                reply = gen.call(
                    cmd="drive", target=target.name, n=todo, concurrency=16, stream_every=10
                )
                served[process] += reply["completed"] + reply["errors"]
                figures.setdefault("errors", 0)
                figures["errors"] += reply["errors"]
                log(
                    f"rss phase {process}: {todo} requests in {reply['seconds']:.1f} s "
                    f"({reply['errors']} errors)"
                )
            time.sleep(0.5)  # let in-flight background work settle before sampling
            figures[f"{label}_requests"] = served[process]
            figures[f"{label}_mb"] = round(probe.rss_mb(), 1)
        early, late = figures["early_mb"], figures["late_mb"]
        figures["growth_pct"] = round((late - early) / early * 100, 2) if early else None
        log(f"rss {process}: {early} MB → {late} MB ({figures['growth_pct']}%)")
        out[process] = figures
    return out


def cpu_phase(
    gen: LoadGen,
    targets: list[Target],
    probes: dict[str, MemoryProbe],
    served: dict[str, int],
    counts: tuple[int, int],
    settle: Settle,
) -> dict[str, dict[str, Any]]:
    """CPU time the serving process spends per request (concurrency 16, no delay).

    For `direct` that is the fake upstream's own cost; for a proxy, the proxy process alone
    (the upstream's share is not included). Immune to the 2-core contention that blurs the
    latency figures: it is the cost that bounds throughput.
    """
    out: dict[str, dict[str, Any]] = {}
    for target in targets:
        probe = probes[target.process]
        figures: dict[str, Any] = {}
        for label, n, stream_every in (("json", counts[0], 0), ("stream", counts[1], 1)):
            before = probe.cpu_seconds()
            reply = gen.call(
                cmd="drive", target=target.name, n=n, concurrency=16, stream_every=stream_every
            )
            settle(target.name)  # background memory writes these requests queued count too
            spent = probe.cpu_seconds() - before
            served[target.process] += n
            figures[f"{label}_ms"] = round(spent / max(1, reply["completed"]) * 1000, 3)
            figures[f"{label}_requests"] = reply["completed"]
            figures[f"{label}_errors"] = reply["errors"]
        log(
            f"cpu {target.name}: {figures['json_ms']:.3f} ms per request, "
            f"{figures['stream_ms']:.3f} ms per 200-chunk stream"
        )
        out[target.name] = figures
    return out


def measure(
    gen: LoadGen,
    targets: list[Target],
    plan: Plan,
    served: dict[str, int],
    probes: dict[str, MemoryProbe],
    settle: Settle,
) -> tuple[dict[str, Samples], dict[str, Samples], dict[tuple[str, int, int], Throughput]]:
    nonstream = {t.name: Samples() for t in targets}
    stream = {t.name: Samples() for t in targets}
    throughput: dict[tuple[str, int, int], Throughput] = {}
    steps: list[tuple[str, int, int]] = [("latency", 0, 0), ("stream", 0, 0)]
    steps += [("throughput", c, d) for d in DELAYS_MS for c in CONCURRENCIES]
    for r in range(plan.rounds):
        order = targets[r % len(targets) :] + targets[: r % len(targets)]
        log(f"round {r + 1}/{plan.rounds} (order: {', '.join(t.name for t in order)})")
        for kind, conc, delay in steps:
            line = []
            for target in order:
                if kind in ("latency", "stream"):
                    # Streams take longer (200 chunks through the proxy): half as many.
                    n = plan.requests if kind == "latency" else max(1, plan.requests // 2)
                    reply = gen.call(
                        cmd="latency",
                        target=target.name,
                        stream=kind == "stream",
                        n=n,
                        delay_ms=0,
                        think_ms=plan.think_ms,
                    )
                    (stream if kind == "stream" else nonstream)[target.name].add(reply)
                    served[target.process] += n + 1
                    p50 = percentile(reply["ttfb_ms" if kind == "stream" else "total_ms"], 50)
                    line.append(f"{target.name} {p50:.2f} ms")
                else:
                    reply = gen.call(
                        cmd="throughput",
                        target=target.name,
                        concurrency=conc,
                        delay_ms=delay,
                        duration=plan.duration,
                        warmup=plan.warmup,
                    )
                    throughput.setdefault((target.name, conc, delay), Throughput()).add(reply)
                    served[target.process] += reply["completed"]
                    line.append(f"{target.name} {reply['rps']:.0f}/s")
                probes[target.process].rss_mb()
                settle(target.name)
            label = {"latency": "non-stream p50", "stream": "stream TTFB p50"}.get(
                kind, f"throughput c={conc} delay={delay}ms"
            )
            log(f"  {label}: " + ", ".join(line))
    return nonstream, stream, throughput
