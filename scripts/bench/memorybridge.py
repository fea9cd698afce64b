"""A `memory-bridge serve` process of the benchmarks and its admin API: its tokens (passthrough,
history, curated memory), their curated documents, and waiting until their jobs are done."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.processes import REPO, Children, child_env, free_port, wait_ready, wait_warm

UPSTREAM_KEY = "sk-bench-upstream-key"

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
                    busy += sum(counts.get(s, 0) for s in ("pending", "coalesced", "running"))
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
    settings: dict[str, str] | None = None,
) -> MemoryBridge:
    """`memory-bridge serve` with its tokens; from `src` (a source tree's `src/`) if given;
    `settings`: more of its environment (e.g. {"VECTOR_MAX_OPEN_SHARDS": "32"})."""
    tmp = tmp / name
    tmp.mkdir()
    data = tmp / "memorybridge-data"
    extra = {"PYTHONPATH": str(src)} if src is not None else {}
    extra.update(settings or {})
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
    # The local model and shards warm up in the background: measured requests wait for them
    # as a load balancer would (a build from before `/ready` answers 404 there: served as is).
    wait_warm(f"{url}/ready", proc, 600)
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
