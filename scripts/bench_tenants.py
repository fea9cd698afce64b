"""What each tenant (token) costs the serving process: threads, open files, RSS, added latency.

    python scripts/bench_tenants.py                                   # 10 -> 200 -> 2,000 tokens
    python scripts/bench_tenants.py --tokens 10,200 --baseline-src /tmp/base --json out.json
    python scripts/bench_tenants.py --tokens 10,50 --requests 10      # smoke run

One command: a fake upstream and `memory-bridge serve` on 127.0.0.1 (and with `--baseline-src
DIR` a second MemoryBridge running DIR/src, e.g. a `git worktree` of the commit before a
change, side by side); tokens are created stage by stage, each doing one chat turn with
episodic memory on (its vector shard is made by the turn's job); after each stage the serving
process's threads, open files and RSS, and the p50 a chat turn of a random token adds over the
upstream alone. The baseline stops at `--baseline-max-tokens` (default 200). The parts live in
`bench/tenants.py`; figures in docs/performance.md ("Tenants: cost per token").
"""

from __future__ import annotations

import sys

from bench.tenants import main

if __name__ == "__main__":
    sys.exit(main())
