"""The benchmarks' parts, behind the thin entry scripts `scripts/bench_*.py`.

Shared by the benchmarks that run MemoryBridge as a process:
  processes.py    ports, child environment, start/stop of every child, `log`
  probes.py       RSS and CPU time of a process tree; the rest of the machine's load
  memorybridge.py a `memory-bridge serve` process, its tokens and curated documents
Per benchmark:
  proxy/          bench_proxy.py: plan, cli, servers, driver, phases, stats, summary, tables,
                  report, litellm_proxy, longterm (`--with-memory`), profiling, run
  placement/      bench_placement.py: prompts, prefix (the measure), conversation, report, run
  recall_*.py     bench_recall.py: cli, report, episodic, mem0, speed; locomo.py (the data)
Run on their own as separate processes (`python scripts/bench/<module>.py`): fake_upstream.py,
fake_gateway.py, loadgen.py (its clients in load_clients.py), and the micro-benchmarks
vectors_micro.py, storage_micro.py, embed_threads.py.
"""
