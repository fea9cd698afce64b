"""What each token's Mem0 instance costs the process, with and without MEM0_MAX_INSTANCES.

    python scripts/bench/mem0_instances.py --tokens 200 --bound 16
    python scripts/bench/mem0_instances.py --tokens 200 --bound 0      # no bound: one per token

One process: a `Mem0Pool` on an embedded engine (`--max-open` shards) and the bench's fake
upstream (its bag-of-words embedder) in a child process; each token stores `--facts` raw facts
(no LLM: Mem0's `infer=False`), which builds its instance. At 10 tokens, half-way and at the
end: the pool's instances, this process's resident memory, threads and open files, and the
median time of a call (its instance's build, if it has none, and its writes). `--rounds N`
visits the tokens in turn N times: with more tokens than the bound, every call builds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from processes import Children, start_fake_upstream

from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.pool import Mem0Pool
from memory_bridge.tenancy.config import validate_config
from memory_bridge.vectors.edge import EdgeEngine


def _figures(pool: Mem0Pool, tokens: int) -> dict[str, int]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())

    def mib(name: str) -> int:
        return int(status[name].split()[0]) // 1024

    return {
        "tokens": tokens,
        "instances": pool.instances,
        "rss_mib": mib("VmRSS"),
        "anon_mib": mib("RssAnon"),  # the heap; file-backed pages are the shards' maps
        "threads": len(os.listdir("/proc/self/task")),
        "open_files": len(os.listdir("/proc/self/fd")),
    }


async def _run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, Any]:
    engine = EdgeEngine(tmp / "data", max_open=args.max_open)
    pool = Mem0Pool(
        engine, tmp / "mem0", threads=4, embed_timeout=30, llm_timeout=30, max_instances=args.bound
    )
    config = validate_config(
        {
            "name": "bench",
            "llm_base_url": f"{url}/v1",
            "memory_llm_provider": "openai",
            "memory_llm_base_url": f"{url}/v1",
            "memory_llm_api_key": "sk-bench",
            "memory_llm_body": {"model": "bench-mem0"},
            "embed_provider": "openai",
            "embed_base_url": f"{url}/v1",
            "embed_api_key": "sk-bench",
            "embed_dims": 32,
            "embed_body": {"model": "bench-embed-bow"},
        }
    )
    rows, firsts = [], []
    calls = args.tokens * args.rounds
    checkpoints = {10, calls // 2, calls}
    for call in range(1, calls + 1):
        token = (call - 1) % args.tokens + 1
        spec = mem0_config.build_spec(token, config, pool.mem0_dir)
        facts = [(f"token {token} fact {call} {n}", {}) for n in range(args.facts)]
        started = time.perf_counter()
        await pool.add_raw(spec, mem0_config.namespace(token, "u"), facts)
        firsts.append(time.perf_counter() - started)
        if call in checkpoints:
            await asyncio.sleep(0.5)  # evicted instances close in the pool's threads
            rows.append({"calls": call, **_figures(pool, min(call, args.tokens))})
    firsts.sort()
    await pool.close_all(10)
    engine.close()
    return {
        "bound": args.bound,
        "max_open_shards": args.max_open,
        "rows": rows,
        "call_p50_ms": round(firsts[len(firsts) // 2] * 1000, 1),
        "built": pool.built,
        "evicted": pool.evicted,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--bound", type=int, default=16, help="MEM0_MAX_INSTANCES (0: none)")
    parser.add_argument("--max-open", type=int, default=8, help="VECTOR_MAX_OPEN_SHARDS")
    parser.add_argument("--facts", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1, help="visits of every token, in turn")
    args = parser.parse_args()
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        children = Children(tmp)
        try:
            url, _ = start_fake_upstream(children, tmp)
            result = asyncio.run(_run(args, url, tmp))
        finally:
            children.stop_all()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
