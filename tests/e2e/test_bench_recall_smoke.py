"""The LoCoMo recall benchmark still runs end to end on one conversation and a few questions,
every variant, and a tiny speed stage.

This checks that `scripts/bench_recall.py` works and reports every figure in range, not how good
or fast retrieval is: no assertion depends on timing or on a recall level.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.support.proxy import REPO
from tests.support.scripts import run_script

LOCOMO = Path(REPO).parent / "shared" / "data" / "locomo"
FIGURES = ("turn@5", "turn@10", "turn@20", "sess@5", "sess@10", "sess@20")

pytestmark = [
    pytest.mark.skipif(
        not (LOCOMO / "locomo_dev.json").is_file(), reason=f"no LoCoMo data under {LOCOMO}"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("sentence_transformers") is None,
        reason="the local embedder needs the 'local' extra (sentence_transformers)",
    ),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_script(
        "bench_recall.py",
        "--limit-conversations",
        "1",
        "--limit-questions",
        "10",
        "--speed",
        "300",
        "--speed-queries",
        "10",
        "--runtimes",
        "onnx,torch",
        workdir=tmp_path_factory.mktemp("bench-recall"),
    )


def _check(summary: dict[str, Any]) -> None:
    assert summary["questions"] > 0
    for name in FIGURES:
        assert 0.0 <= summary[name] <= 1.0, name
    for k in (5, 10):  # a longer list finds at least as much
        assert summary[f"turn@{k}"] <= summary[f"turn@{k * 2}"]
        assert summary[f"sess@{k}"] <= summary[f"sess@{k * 2}"]
    assert summary["p50_ms"] > 0
    assert summary["p95_ms"] > 0
    assert summary["p50_ms"] <= summary["p95_ms"]


def test_one_conversation_is_scored(report: dict[str, Any]) -> None:
    assert len(report["conversations"]) == 1
    (summary,) = report["conversations"].values()
    _check(summary)
    assert summary["questions"] == 10
    assert summary["turns"] > 0


def test_overall_and_categories_are_in_range(report: dict[str, Any]) -> None:
    _check(report["overall"])
    assert report["by_category"]
    for summary in report["by_category"].values():
        _check(summary)
    assert sum(s["questions"] for s in report["by_category"].values()) == 10


def test_every_variant_is_scored(report: dict[str, Any]) -> None:
    variants = report["variants"]
    assert variants[0]["name"] == "product"
    assert variants[0]["overall"] == report["overall"]
    names = {v["name"] for v in variants}
    assert {"ctx-1/1", "ctx-0.5/1", "plain-1/1", "ctx-1/1-dated"} <= names
    for variant in variants:
        _check(variant["overall"])
        assert sum(s["questions"] for s in variant["by_category"].values()) == 10


def test_the_speed_stage_times_recall(report: dict[str, Any]) -> None:
    (row,) = report["speed"]["rows"]
    assert row["memories"] == 300
    for state in ("as_filled", "optimized"):
        figures = row[state]
        assert figures["queries"] > 0
        assert figures["mean_candidates"] > 0
        assert set(figures["runtimes"]) == {"onnx", "torch"}
        for runtime, stages in figures["runtimes"].items():
            for part in ("recall", "embed", "search"):
                p50, p95 = stages[part]["p50_ms"], stages[part]["p95_ms"]
                assert 0 < p50 <= p95, (state, runtime, part)


def test_the_table_is_printed(report: dict[str, Any]) -> None:
    assert "| conversation |" in report["stdout"]
    assert "**overall**" in report["stdout"]
    assert "reference dense MiniLM" in report["stdout"]
    assert "| variant |" in report["stdout"]
    assert "| memories |" in report["stdout"]
