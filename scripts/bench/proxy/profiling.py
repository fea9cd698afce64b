"""`--profile`: py-spy on the proxy while the load generator drives one target; the flame,
summarised by `bench/flame.py`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.processes import log
from bench.proxy.driver import LoadGen
from bench.proxy.plan import Target


def profile_proxy(
    gen: LoadGen,
    target: Target,
    pid: int,
    out: Path,
    seconds: float,
    logs: Path,
    concurrency: int = 16,
) -> str:
    """py-spy on the proxy while the load generator drives `target`; the flame, summarised."""
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        return "py-spy is not installed (pip install py-spy); no profile taken"
    out.parent.mkdir(parents=True, exist_ok=True)
    # --gil: only the thread holding the GIL is sampled, i.e. where Python CPU time goes
    # (threads blocked in SQLite or waiting for the GIL would otherwise look busy);
    # --nonblocking: the proxy is not paused per sample, so the load is not distorted.
    argv = [found, "record", "--pid", str(pid), "--format", "raw", "--threads", "--gil"]
    argv += ["--nonblocking"]
    argv += ["--rate", "250", "--duration", str(int(seconds) + 1), "--output", str(out)]
    with (logs / "py-spy.log").open("wb") as spy_log:
        spy = subprocess.Popen(argv, stdout=spy_log, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        time.sleep(1.0)  # attached before the load starts
        log(f"profiling {target.name} at c={concurrency} for {seconds:g} s with py-spy")
        reply = gen.call(
            cmd="throughput",
            target=target.name,
            concurrency=concurrency,
            delay_ms=0,
            duration=seconds - 1,
            warmup=0.5,
        )
        log(f"  under the profiler: {reply['rps']:.0f} requests/s")
        spy.wait(seconds + 60)
    finally:
        if spy.poll() is None:
            spy.terminate()
            spy.wait(10)
    if spy.returncode != 0 or not out.exists():
        return f"py-spy failed ({spy.returncode}): see {logs}/py-spy.log"
    from bench.flame import summarise as summarise_flame

    return summarise_flame(out.read_text())
