"""The vector micro-benchmark still runs end to end (tiny sizes; it asserts nothing about speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "vectors_micro.py"


def test_vectors_micro_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "200", "--queries", "5", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["adapter"], r["points"]) for r in rows] == [("edge", 200), ("local", 200)]
    for row in rows:
        assert row["inserts_per_s"] > 0
        assert row["query"]["queries"] == 5
        assert 0 < row["query"]["p50_ms"] <= row["query"]["p95_ms"]
    assert "optimize_s" in rows[0]
    assert "| edge | 200 |" in done.stdout
