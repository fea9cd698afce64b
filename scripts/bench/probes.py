"""What a run costs: memory (RSS) and CPU time of a process and its descendants, and how busy
the rest of the machine was meanwhile (the noise indicator printed under every table)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _proc_tree(pid: int) -> list[int]:
    pids = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    pids.extend(_proc_tree(int(child)))
    return pids


def _status_kb(pid: int, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


@dataclass
class MemoryProbe:
    """RSS of a process and its descendants: /proc on Linux, psutil elsewhere."""

    pid: int
    sampled_peak_mb: float = 0.0

    def rss_mb(self) -> float:
        if Path("/proc/self/status").exists():
            value = sum(_status_kb(p, "VmRSS") for p in _proc_tree(self.pid)) / 1024
        else:
            import psutil  # type: ignore[import-untyped,unused-ignore]

            proc = psutil.Process(self.pid)
            procs = [proc, *proc.children(recursive=True)]
            value = sum(p.memory_info().rss for p in procs) / 2**20
        self.sampled_peak_mb = max(self.sampled_peak_mb, value)
        return value

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process and its descendants (all their threads)."""
        if Path("/proc/self/stat").exists():
            ticks = 0
            for pid in _proc_tree(self.pid):
                with contextlib.suppress(OSError):
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    ticks += int(fields[11]) + int(fields[12])  # utime, stime
            return ticks / os.sysconf("SC_CLK_TCK")
        import psutil  # type: ignore[import-untyped,unused-ignore]

        proc = psutil.Process(self.pid)
        times = [p.cpu_times() for p in [proc, *proc.children(recursive=True)]]
        return float(sum(t.user + t.system for t in times))

    def peak_mb(self) -> float:
        """VmHWM (the kernel's high-water mark) where there is one, else the sampled peak."""
        if Path("/proc/self/status").exists():
            return max(
                sum(_status_kb(p, "VmHWM") for p in _proc_tree(self.pid)) / 1024,
                self.sampled_peak_mb,
            )
        return max(self.rss_mb(), self.sampled_peak_mb)


def machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot (all CPUs), or None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def other_load(
    busy_before: float | None, wall: float, ours: float, load_before: float
) -> dict[str, Any]:
    """How much CPU processes outside this benchmark took during the run (noise indicator)."""
    busy_after = machine_busy_seconds()
    figures: dict[str, Any] = {
        "loadavg_1m_start": round(load_before, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }
    if busy_before is not None and busy_after is not None and wall > 0:
        others = max(0.0, busy_after - busy_before - ours)
        figures["other_processes_cpu_pct"] = round(100 * others / wall / (os.cpu_count() or 1), 1)
    return figures
