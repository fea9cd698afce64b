"""LiteLLM's proxy beside MemoryBridge: installed once into its own virtualenv, configured as
lean as we found fair (see docs/performance.md), one worker, no database."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.memorybridge import UPSTREAM_KEY
from bench.processes import REPO, Children, child_env, free_port, log
from bench.proxy.plan import DELAYS_MS

DEFAULT_LITELLM_VENV = REPO / ".bench" / "litellm-venv"
LITELLM_KEY = "sk-bench-litellm-master-key"


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
