"""`bench_proxy.py` from start to end: start the processes, measure in phases, report, and stop
every process it started."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.probes import MemoryProbe, machine_busy_seconds, other_load
from bench.processes import Children, log, terminate
from bench.proxy import servers
from bench.proxy.cli import parse_args
from bench.proxy.driver import LoadGen, start_loadgen
from bench.proxy.phases import cpu_phase, measure, rss_phase, rss_subjects, run_checks, warm_up
from bench.proxy.plan import TARGET_INFO, Plan, make_plan
from bench.proxy.profiling import profile_proxy
from bench.proxy.report import print_report, write_json
from bench.proxy.servers import Lineup
from bench.proxy.summary import summarise
from bench.proxy.tables import render_table


@dataclass(frozen=True)
class Clock:
    """Where the machine stood when the run started: its duration and the others' load."""

    started: float
    busy_before: float | None
    self_before: float
    load_before: float

    @classmethod
    def start(cls) -> Clock:
        return cls(
            time.monotonic(), machine_busy_seconds(), sum(os.times()[:2]), os.getloadavg()[0]
        )


def start_meta(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "plan": plan.__dict__,
        "client": args.client,
        "targets": TARGET_INFO,
    }


def line_up(args: argparse.Namespace, lineup: Lineup) -> None:
    """Every process and target of the run, started and ready."""
    servers.start_upstream(lineup)
    servers.begin_litellm(lineup, args.litellm_venv, args.skip_litellm)
    servers.start_current(lineup, args.with_memory, args.memories, args.memory_embedder)
    if args.baseline_src is not None:
        servers.start_baseline(lineup, args.baseline_src, args.memories, args.memory_embedder)
    if args.targets:
        servers.select_targets(lineup, args.targets)
    servers.add_litellm(lineup)


def check_and_warm(gen: LoadGen, lineup: Lineup, plan: Plan) -> dict[str, int]:
    """The targets that answer their checks, warmed up; requests served so far per process."""
    targets = {t.name: t.spec() for t in lineup.targets}
    lineup.meta["client"] = gen.call(cmd="targets", targets=targets)["engine"]
    lineup.targets = run_checks(gen, lineup.targets, lineup.skipped)
    if not lineup.targets or lineup.targets[0].name != "direct":
        raise RuntimeError(f"the direct target does not work: {lineup.skipped.get('direct')}")
    served = {name: 0 for name in lineup.probes}
    warm_up(gen, lineup.targets, plan, served, lineup.settle)
    return served


def measure_all(
    gen: LoadGen, lineup: Lineup, plan: Plan, served: dict[str, int]
) -> dict[str, dict[str, Any]]:
    """Every phase's figures, summarised per target."""
    targets, probes = lineup.targets, lineup.probes
    rss = rss_phase(gen, rss_subjects(targets, probes), served, plan.rss_counts)
    cpu = cpu_phase(gen, targets, probes, served, plan.cpu_counts, lineup.settle)
    nonstream, stream, throughput = measure(gen, targets, plan, served, probes, lineup.settle)
    peaks = {name: probe.peak_mb() for name, probe in probes.items()}
    return summarise(targets, nonstream, stream, throughput, rss, peaks, cpu)


def maybe_profile(gen: LoadGen, lineup: Lineup, args: argparse.Namespace) -> None:
    if not args.profile:
        return
    chosen = next((t for t in lineup.targets if t.name == args.profile_target), None)
    if chosen is None:
        return
    flame = profile_proxy(
        gen,
        chosen,
        lineup.builds["mb"].proc.pid,
        args.profile,
        args.profile_seconds,
        lineup.children.logs,
        args.profile_concurrency,
    )
    lineup.meta["profile"] = {
        "file": str(args.profile),
        "target": chosen.name,
        "concurrency": args.profile_concurrency,
        "summary": flame,
    }


def close_meta(lineup: Lineup, gen: LoadGen, clock: Clock, served: dict[str, int]) -> None:
    """The run's duration, and the CPU the rest of the machine took meanwhile."""
    meta = lineup.meta
    meta["seconds"] = round(time.monotonic() - clock.started, 1)
    ours = sum(probe.cpu_seconds() for probe in lineup.probes.values())
    ours += sum(os.times()[:4]) - clock.self_before  # this script, and the children it reaped
    ours += MemoryProbe(gen.proc.pid).cpu_seconds() if gen.proc.poll() is None else 0.0
    meta["machine_load"] = other_load(clock.busy_before, meta["seconds"], ours, clock.load_before)
    meta["served"] = served


def run(args: argparse.Namespace, plan: Plan, lineup: Lineup, clock: Clock) -> None:
    line_up(args, lineup)
    gen = start_loadgen(lineup.children, lineup.tmp, args.client)
    served = check_and_warm(gen, lineup, plan)
    results = measure_all(gen, lineup, plan, served)
    maybe_profile(gen, lineup, args)
    gen.close()
    close_meta(lineup, gen, clock, served)
    table = render_table(results, lineup.skipped, plan.rss_counts)
    print_report(table, results, lineup.skipped, lineup.meta, plan)
    if args.json:
        write_json(args.json, lineup.meta, lineup.skipped, results, table)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    signal.signal(signal.SIGTERM, terminate)
    clock = Clock.start()
    tmp = Path(tempfile.mkdtemp(prefix="mb-bench-"))
    (tmp / "logs").mkdir()
    lineup = Lineup(tmp, Children(tmp / "logs"), start_meta(args, plan))
    log(f"temp dir {tmp}; plan {plan}")
    try:
        run(args, plan, lineup, clock)
        return 0
    finally:
        lineup.children.stop_all()
        if args.keep_temp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
