"""The command line of `bench_proxy.py`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bench.proxy.litellm_proxy import DEFAULT_LITELLM_VENV
from bench.proxy.longterm import local_extra_installed

DESCRIPTION = "Benchmark MemoryBridge side by side with direct calls and with LiteLLM's proxy."


def _add_plan_options(parser: argparse.ArgumentParser) -> None:
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
        help="served-request counts at which RSS is read, 'EARLY,LATE' "
        "(default 1000,10000; quick 30,90)",
    )
    parser.add_argument(
        "--cpu-requests",
        default=None,
        help="non-streaming and streaming requests of the CPU figures, 'N,M' "
        "(default 2000,300; quick 100,15)",
    )


def _add_target_options(parser: argparse.ArgumentParser) -> None:
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


def _add_profile_options(parser: argparse.ArgumentParser) -> None:
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _add_plan_options(parser)
    _add_target_options(parser)
    _add_profile_options(parser)
    args = parser.parse_args(argv)
    # The repository, not its src/: given src/, the baseline would import nothing from it and
    # silently run the installed (current) code in both columns.
    if args.baseline_src is not None and not (args.baseline_src / "src" / "memory_bridge").is_dir():
        parser.error(f"--baseline-src: no src/memory_bridge under {args.baseline_src}")
    return args
