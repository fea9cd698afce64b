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

import sys

from bench.proxy.run import main

if __name__ == "__main__":
    sys.exit(main())
