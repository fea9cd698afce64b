"""Start-up time: importing the app, `memory-bridge serve` to its first `/health` 200, CLI calls.

    python scripts/bench/startup.py [--baseline-src DIR] [--repeats 5]

Each figure is the median of `--repeats` fresh processes (the OS file cache warm: the first,
cold run is thrown away): `import memory_bridge.server.app` alone; `memory-bridge serve` from
launch to the first `/health` 200 (the embedded vector store, BM25-only episodic memory, the
same environment the end-to-end tests use) and on to `/ready` 200; and a few CLI commands on
the local database. With `--baseline-src`, the same runs on the code under DIR/src (e.g. a
worktree of the commit before), alternating run by run, so both trees see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import child_env, free_port, wait_ready
from bench.trees import REPO, source_trees

START_TIMEOUT = 120.0  # a bound for a loaded machine, not a measurement
IMPORT_CODE = (
    "import time; t = time.perf_counter(); import memory_bridge.server.app; "
    "print(time.perf_counter() - t)"
)


def env_for(src: str, data_dir: Path) -> dict[str, str]:
    """The end-to-end tests' environment (tests/support/serve.py), on `src`'s code."""
    return child_env(
        PYTHONPATH=src,
        MEMORY_BRIDGE_DATA_DIR=str(data_dir),
        DATABASE_URL="",
        QDRANT_URL="",
        LOG_LEVEL="WARNING",
        MEMORY_TEMPLATE_PATH=str(REPO / "templates" / "memory_template.md"),
        MEMORY_TEMPLATE_ZH_PATH=str(REPO / "templates" / "memory_template_zh.md"),
        MEM0_TELEMETRY="False",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        EPISODIC_DEFAULT_EMBEDDER="none",
    )


def cli(env: dict[str, str], *args: str) -> float:
    """Seconds one `memory-bridge <args>` takes, launch to exit."""
    started = time.perf_counter()
    done = subprocess.run(  # noqa: S603 (our own command)
        [sys.executable, "-m", "memory_bridge", *args], env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"memory-bridge {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return elapsed


def import_app(env: dict[str, str]) -> float:
    done = subprocess.run(  # noqa: S603 (our own code)
        [sys.executable, "-c", IMPORT_CODE], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return float(done.stdout.strip().splitlines()[-1])


def serve(env: dict[str, str], workdir: Path) -> tuple[float, float]:
    """Seconds from launching `memory-bridge serve` to `/health` 200, and to `/ready` 200."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (workdir / "serve.log").open("ab") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(  # noqa: S603 (our own command)
            [sys.executable, "-m", "memory_bridge", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_ready(url + "/health", proc, "serve", START_TIMEOUT, interval=0.01)
        health = time.perf_counter() - started
        wait_ready(url + "/ready", proc, "serve", START_TIMEOUT, interval=0.01)
        return health, time.perf_counter() - started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def measures(env: dict[str, str], workdir: Path) -> dict[str, Callable[[], dict[str, float]]]:
    """Each step's figures by label; `serve` gives two from one launch."""

    def serve_step() -> dict[str, float]:
        health, ready = serve(env, workdir)
        return {"serve → /health 200": health, "serve → /ready 200": ready}

    def one(label: str, run: Callable[[], float]) -> Callable[[], dict[str, float]]:
        return lambda: {label: run()}

    create = ("token", "create", "--name", "bench", "--llm-base-url", "http://127.0.0.1:9/v1")
    return {
        "import": one("import memory_bridge.server.app", lambda: import_app(env)),
        "serve": serve_step,
        "help": one("memory-bridge --help", lambda: cli(env, "--help")),
        "list": one("memory-bridge token list", lambda: cli(env, "token", "list")),
        "create": one("memory-bridge token create", lambda: cli(env, *create)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", help="a second tree to measure side by side")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure and tree")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    trees = source_trees(args.baseline_src)
    with tempfile.TemporaryDirectory(prefix="mb-startup-") as tmp:
        envs = {}
        for name, src in trees.items():
            workdir = Path(tmp) / name.replace(" ", "-")
            env = env_for(src, workdir / "data")
            workdir.mkdir()
            cli(env, "init")
            envs[name] = (env, workdir)
        table = {name: measures(env, workdir) for name, (env, workdir) in envs.items()}
        rows = []
        print("| p50 seconds | " + " | ".join(trees) + " |")
        print("|---|" + "---|" * len(trees))
        for step in table["this tree"]:
            runs: dict[str, dict[str, list[float]]] = {}
            for i in range(args.repeats + 1):
                for name in trees:
                    figures = table[name][step]()
                    if i:  # the first run warms the file cache
                        for label, value in figures.items():
                            runs.setdefault(label, {n: [] for n in trees})[name].append(value)
            for label, by_tree in runs.items():
                medians = {name: statistics.median(values) for name, values in by_tree.items()}
                rows.append({"measure": label, **medians})
                cells = " | ".join(f"{v:.2f}" for v in medians.values())
                print(f"| {label} | {cells} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
