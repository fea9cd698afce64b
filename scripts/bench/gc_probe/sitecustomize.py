"""Garbage-collector pauses of a running `memory-bridge serve`, for benchmarks.

Put this directory first on PYTHONPATH of the process to observe (the benchmark passes its
environment on to the processes it starts) and name a directory in GC_PROBE_DIR:

    GC_PROBE_DIR=.bench/gc PYTHONPATH=scripts/bench/gc_probe \\
        python scripts/bench_proxy.py --quick --skip-litellm --with-memory

Every `memory_bridge ... serve` process then keeps, per generation, how many collections ran,
their total, mean and longest pause and how many objects they freed, in
`$GC_PROBE_DIR/gc-<pid>.txt` (rewritten after each collection). Other processes are left
alone. Python imports `sitecustomize` at start-up, before `sys.argv` is set, so the process
is recognised by its command line in /proc.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any


def _is_memorybridge_server() -> bool:
    try:
        argv = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in argv and any(b"memory_bridge" in a or b"memory-bridge" in a for a in argv)


def _install(out: Path) -> None:
    started = [0.0]
    totals: dict[int, list[float]] = {}  # generation -> [count, total ms, max ms, freed]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        pause = (time.perf_counter() - started[0]) * 1000
        row = totals.setdefault(info["generation"], [0, 0.0, 0.0, 0])
        row[0] += 1
        row[1] += pause
        row[2] = max(row[2], pause)
        row[3] += info["collected"]
        lines = [
            f"gen{gen}: n={int(n)} total={total:.1f}ms mean={total / n:.3f}ms "
            f"max={longest:.2f}ms freed={int(freed)}"
            for gen, (n, total, longest, freed) in sorted(totals.items())
        ]
        out.write_text("\n".join(lines) + "\n")

    gc.callbacks.append(callback)


_dir = os.environ.get("GC_PROBE_DIR")
if _dir and _is_memorybridge_server():
    Path(_dir).mkdir(parents=True, exist_ok=True)
    _install(Path(_dir).resolve() / f"gc-{os.getpid()}.txt")
