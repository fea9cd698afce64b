"""Everything `bench_proxy.py` measures, started: the fake upstream, LiteLLM, MemoryBridge (and a
baseline build of it), and the targets they serve."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.memorybridge import UPSTREAM_KEY, MemoryBridge, start_memorybridge
from bench.probes import MemoryProbe
from bench.processes import Children, log, start_fake_upstream, wait_ready
from bench.proxy.litellm_proxy import (
    LITELLM_ENV,
    LITELLM_KEY,
    ensure_litellm,
    litellm_config,
    litellm_version,
    start_litellm,
)
from bench.proxy.longterm import enable_long_term_memory
from bench.proxy.plan import DELAYS_MS, Target, memorybridge_targets


@dataclass
class Lineup:
    """The processes of one run and the targets they serve; what is left out, and why."""

    tmp: Path
    children: Children
    meta: dict[str, Any]
    upstream: str = ""
    skipped: dict[str, str] = field(default_factory=dict)
    probes: dict[str, MemoryProbe] = field(default_factory=dict)
    builds: dict[str, MemoryBridge] = field(default_factory=dict)  # by target prefix
    targets: list[Target] = field(default_factory=list)
    litellm: tuple[subprocess.Popen[Any], str] | None = None

    def settle(self, name: str) -> None:
        """A memory column's requests queue background jobs (the episodic index of every
        token with memory; Mem0 writes with `--with-memory`) in the process that serves
        every column of its build: let them finish before the next measurement, so they
        are not billed to another target."""
        prefix, _, kind = name.partition("-")
        if prefix in self.builds and kind != "pass":
            self.builds[prefix].drain_jobs()


def start_upstream(lineup: Lineup) -> None:
    lineup.upstream, fake = start_fake_upstream(lineup.children, lineup.tmp)
    lineup.probes["fake-upstream"] = MemoryProbe(fake.pid)
    lineup.targets.append(
        Target("direct", f"{lineup.upstream}/v1", UPSTREAM_KEY, None, "fake-upstream")
    )


def begin_litellm(lineup: Lineup, venv: Path, skip: bool) -> None:
    """LiteLLM starts first (it is slow to start) and is waited for last (`add_litellm`)."""
    if skip:
        lineup.skipped["litellm"] = "skipped (--skip-litellm)"
        return
    exe, how = ensure_litellm(venv, lineup.children.logs)
    if exe is None:
        lineup.skipped["litellm"] = how
        log(f"LiteLLM unavailable: {how}")
        return
    lineup.meta["litellm"] = {
        "version": litellm_version(venv),
        "venv": how,
        "env": LITELLM_ENV,
        "config": litellm_config("<upstream>", DELAYS_MS),
    }
    lineup.litellm = start_litellm(lineup.children, exe, lineup.tmp, lineup.upstream)


def start_current(lineup: Lineup, with_memory: bool, memories: int, embedder: str) -> None:
    mb = start_memorybridge(lineup.children, lineup.tmp, lineup.upstream)
    lineup.probes["memorybridge"] = MemoryProbe(mb.proc.pid)
    if with_memory:
        why_not = enable_long_term_memory(mb, lineup.upstream, memories, embedder)
        if why_not:
            log(f"--with-memory skipped: {why_not}")
            lineup.meta["with_memory"] = f"skipped: {why_not}"
        else:
            lineup.meta["with_memory"] = mb.memory_note
    lineup.meta["mb_memory_layers"] = mb.memory_note
    lineup.builds["mb"] = mb
    lineup.targets += memorybridge_targets(mb, "mb", "memorybridge")


def start_baseline(lineup: Lineup, baseline: Path, memories: int, embedder: str) -> None:
    """A second MemoryBridge running the source tree at `baseline`: the `base-*` columns."""
    src = baseline.resolve() / "src"
    children, tmp, upstream = lineup.children, lineup.tmp, lineup.upstream
    base = start_memorybridge(children, tmp, upstream, "memorybridge-base", src)
    lineup.probes["memorybridge-base"] = MemoryProbe(base.proc.pid)
    lineup.builds["base"] = base
    if "long-term" in lineup.builds["mb"].memory_note:  # the same layers in its memory column
        why_not = enable_long_term_memory(base, lineup.upstream, memories, embedder)
        lineup.meta["baseline_with_memory"] = why_not or base.memory_note
    lineup.targets += memorybridge_targets(base, "base", "memorybridge-base")
    lineup.meta["baseline_src"] = str(baseline)


def select_targets(lineup: Lineup, chosen: str) -> None:
    """`--targets`: only these columns (and `direct`), and only the processes serving them."""
    wanted = {"direct", *chosen.split(",")}
    for target in lineup.targets:
        if target.name not in wanted:
            lineup.skipped[target.name] = "not selected (--targets)"
    lineup.targets = [t for t in lineup.targets if t.name in wanted]
    lineup.probes = {
        k: v for k, v in lineup.probes.items() if any(t.process == k for t in lineup.targets)
    }


def add_litellm(lineup: Lineup) -> None:
    if lineup.litellm is None:
        return
    proc, url = lineup.litellm
    try:
        t0 = time.monotonic()
        wait_ready(f"{url}/health/liveliness", proc, "litellm", 300)
        log(f"LiteLLM ready after {time.monotonic() - t0:.1f} s more")
        lineup.probes["litellm"] = MemoryProbe(proc.pid)
        lineup.targets.append(Target("litellm", f"{url}/v1", LITELLM_KEY, None, "litellm"))
    except RuntimeError as exc:
        lineup.skipped["litellm"] = f"{exc}: {lineup.children.log_tail('litellm', 5)}"
        log(f"LiteLLM left out: {lineup.skipped['litellm']}")
