"""Prompt-prefix stability of what MemoryBridge forwards, turn by turn (issue 15, placement).

    python scripts/bench_placement.py                                  # current build, 20 turns
    python scripts/bench_placement.py --baseline-src /tmp/base --json .bench/placement.json
    python scripts/bench_placement.py --quick                          # 6 turns, smoke run
    python scripts/bench_placement.py --no-reference-first             # skip that layout

Providers cache a prompt by exact prefix, so what matters turn after turn is how much of the
forwarded prompt starts exactly like the previous turn's. One conversation with every memory
layer on (curated MEMORY.md + USER.md, session history, long-term memory through Mem0 with the
fake upstream's extraction LLM and embedder, a Memory Gateway whose hits change every turn) is
driven through MemoryBridge; a recording fake upstream hands back each forwarded body.

The measure, per turn t >= 2: the share of turn t's forwarded prompt that equals turn t-1's
prefix, `common_prefix(P[t], P[t-1]) / len(P[t])`, where P is the `messages` array of the JSON
body the upstream received, parsed and serialized again as compact UTF-8 JSON
(`json.dumps(messages, ensure_ascii=False, separators=(",", ":"))`, keys in received order):
the whole chat prompt, with the body's other fields and its whitespace left out. The share of
the raw body's bytes is kept in the JSON too (`body_share`) as a cross-check.

Conversations: `current` (a history window holding the whole conversation), `current-window-20`
(the token default of 20 messages, which slides within 20 turns) and
`current-reference-first` (window 20, `memory.placement: "reference_first"`). With
`--baseline-src DIR` a second MemoryBridge runs the build under DIR/src (e.g. a `git worktree`
of the commit before a change) through the same conversation, side by side: `old` and
`old-window-20`.
Processes, ports and environment come from `bench/processes.py`; the parts live in
`bench/placement/`. See docs/performance.md.
"""

from __future__ import annotations

import sys

from bench.placement.run import main

if __name__ == "__main__":
    sys.exit(main())
