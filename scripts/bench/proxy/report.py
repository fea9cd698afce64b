"""What `bench_proxy.py` prints after the table, and the JSON it writes with `--json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.processes import log
from bench.proxy.plan import Plan
from bench.proxy.tables import error_notes


def print_report(
    table: str,
    results: dict[str, dict[str, Any]],
    skipped: dict[str, str],
    meta: dict[str, Any],
    plan: Plan,
) -> None:
    print(table)
    for note in error_notes(results):
        print(f"- errors: {note}")
    for name, why in skipped.items():
        print(f"- {name}: {why}")
    print(f"- mb-memory layers: {meta['mb_memory_layers']}")
    if str(meta.get("with_memory", "")).startswith("skipped"):
        print(f"- --with-memory {meta['with_memory']}")
    print(
        f"- {meta['machine']['cpus']} CPUs, {plan.rounds} interleaved rounds, "
        f"{plan.requests} latency requests/round, {plan.duration:g} s per throughput "
        f"figure, client {meta['client']}, LiteLLM "
        f"{meta.get('litellm', {}).get('version', 'n/a')}, {meta['seconds']:.0f} s in all"
    )
    load = meta["machine_load"]
    print(
        f"- other processes on the machine used {load.get('other_processes_cpu_pct', '?')}% "
        f"of its CPU during the run (1-min load average {load['loadavg_1m_start']} → "
        f"{load['loadavg_1m_end']})"
    )
    if "profile" in meta:
        prof = meta["profile"]
        print(
            f"\nProfile under {prof['target']} at c={prof['concurrency']} ({prof['file']}):"
            f"\n\n{prof['summary']}"
        )


def write_json(
    path: Path,
    meta: dict[str, Any],
    skipped: dict[str, str],
    results: dict[str, dict[str, Any]],
    table: str,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "skipped": skipped, "results": results, "table": table}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    log(f"figures written to {path}")
