"""The load generator process (`bench/loadgen.py`) seen from the benchmark: one JSON command per
line on its stdin, one JSON answer per line on its stdout."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.processes import BENCH_DIR, Children, child_env


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


def start_loadgen(children: Children, tmp: Path, client: str) -> LoadGen:
    argv = [sys.executable, str(BENCH_DIR / "loadgen.py"), "--client", client]
    return LoadGen(children.start("loadgen", argv, child_env(), tmp, pipe_stdio=True))
