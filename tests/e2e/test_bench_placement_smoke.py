"""The prompt-prefix benchmark still runs end to end: a few turns, every memory layer on.

This checks that `scripts/bench_placement.py` works and reports a share for every turn, not how
stable any build's prompt is: no assertion depends on a share's level or on timing. The old
build is added side by side when a worktree of it is at /tmp/base (`git worktree add /tmp/base
6f4bdf3`); without it only the current build runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import run_script

BASELINE = Path("/tmp/base")
QUICK_TURNS = 6


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    args = ["--quick"]
    if (BASELINE / "src" / "memory_bridge").is_dir():
        args += ["--baseline-src", str(BASELINE)]
    return run_script("bench_placement.py", *args, workdir=tmp_path_factory.mktemp("placement"))


def _builds(report: dict[str, Any]) -> list[str]:
    return ["current", "old"] if "old" in report["meta"]["builds"] else ["current"]


def test_every_build_has_a_share_for_every_turn(report: dict[str, Any]) -> None:
    assert report["meta"]["turns"] == QUICK_TURNS
    for name in _builds(report):
        turns = report["conversations"][name]["turns"]
        assert [t["turn"] for t in turns] == list(range(1, QUICK_TURNS + 1))
        assert turns[0]["share"] is None  # nothing to compare the first prompt with
        for t in turns[1:]:
            assert 0.0 <= t["share"] <= 1.0
            assert 0 <= t["prefix_bytes"] <= t["bytes"]
            assert t["share"] == round(t["prefix_bytes"] / t["bytes"], 4)
            assert 0.0 <= t["body_share"] <= 1.0
            assert t["breaks_in"]
        late = [t["share"] for t in turns if t["turn"] >= 5]
        assert report["conversations"][name]["summary"]["min"] == min(late)


def test_every_layer_was_on(report: dict[str, Any]) -> None:
    assert report["problems"] == []
    for name in _builds(report):
        turns = report["conversations"][name]["turns"]
        for t in turns:
            assert t["injected"]["curated"] == "1"
            assert int(t["injected"]["gateway"]) > 0
            assert t["injected"]["history"] == str(2 * (t["turn"] - 1))
        assert int(turns[-1]["injected"]["longterm"]) > 0


def test_the_table_is_printed(report: dict[str, Any]) -> None:
    header = report["stdout"].splitlines()[0]
    for name in _builds(report):
        assert f" {name} |" in header
    assert "min from turn 5" in report["stdout"]
    assert report["meta"]["serialization"].startswith("json.dumps(body")
