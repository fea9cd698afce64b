"""The benchmark script still runs end to end: a few requests per figure, LiteLLM left out.

This checks that `scripts/bench_proxy.py` works and reports every figure, not how fast
anything is: no assertion here depends on timing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.proxy import REPO
from tests.support.scripts import run_script

TARGETS = ("direct", "mb-pass", "mb-fresh", "mb-history", "mb-memory")
THROUGHPUT_KEYS = ("c16_d0", "c64_d0", "c16_d200", "c64_d200")
# The CPU figures over a few requests: their presence is checked, not their level.
SMOKE_CPU = ("--cpu-requests", "30,5")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = run_script(
        "bench_proxy.py",
        "--quick",
        "--skip-litellm",
        *SMOKE_CPU,
        workdir=tmp_path_factory.mktemp("bench"),
    )
    assert "| measurement |" in data["stdout"]
    return data


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def test_every_target_is_measured_and_litellm_is_reported_as_skipped(
    report: dict[str, Any],
) -> None:
    assert set(TARGETS) <= set(report["results"])
    assert "litellm" in report["skipped"]
    for name in (*TARGETS, "litellm"):
        assert name in report["table"]
        assert name in report["stdout"]


@pytest.mark.parametrize("name", TARGETS)
def test_latency_figures_are_positive_with_ratios(report: dict[str, Any], name: str) -> None:
    ns = report["results"][name]["nonstream"]
    assert ns["errors"] == 0, ns["error_sample"]
    assert ns["n"] > 0
    for q in (50, 95, 99):
        assert _positive(ns[f"p{q}_ms"])
        assert _positive(ns[f"ratio_p{q}"])
        assert isinstance(ns[f"added_p{q}_ms"], int | float)
    assert ns["p50_ms"] <= ns["p95_ms"] <= ns["p99_ms"]

    st = report["results"][name]["stream"]
    assert st["errors"] == 0, st["error_sample"]
    for metric in ("ttfb", "total"):
        for q in (50, 95):
            assert _positive(st[f"{metric}_p{q}_ms"])
            assert _positive(st[f"ratio_{metric}_p{q}"])
            assert isinstance(st[f"added_{metric}_p{q}_ms"], int | float)
    assert st["ttfb_p50_ms"] <= st["total_p50_ms"]


@pytest.mark.parametrize("name", TARGETS)
def test_throughput_figures_are_positive_with_ratios(report: dict[str, Any], name: str) -> None:
    figures = report["results"][name]["throughput"]
    for key in THROUGHPUT_KEYS:
        assert figures[key]["errors"] == 0, figures[key]["error_sample"]
        assert _positive(figures[key]["rps"]), key
        assert _positive(figures[key]["ratio"]), key


@pytest.mark.parametrize("name", TARGETS)
def test_memory_figures(report: dict[str, Any], name: str) -> None:
    rss = report["results"][name]["rss"]
    assert _positive(rss["peak_mb"])
    assert _positive(rss["ratio_peak"])
    if name.startswith("mb-"):
        assert rss["process"] == "memorybridge"
        assert _positive(rss["early_mb"]) and _positive(rss["late_mb"])
        assert rss["early_requests"] < rss["late_requests"]
        assert isinstance(rss["growth_pct"], int | float)


@pytest.mark.parametrize("name", TARGETS)
def test_cpu_figures(report: dict[str, Any], name: str) -> None:
    cpu = report["results"][name]["cpu"]
    for kind in ("json", "stream"):
        assert cpu[f"{kind}_errors"] == 0
        assert cpu[f"{kind}_requests"] > 0
        assert _positive(cpu[f"{kind}_ms"]) or cpu[f"{kind}_ms"] == 0  # clock ticks are coarse
        assert cpu[f"ratio_{kind}"] is None or cpu[f"ratio_{kind}"] >= 0


def test_direct_is_the_baseline(report: dict[str, Any]) -> None:
    direct = report["results"]["direct"]
    assert direct["nonstream"]["ratio_p50"] == 1.0
    assert direct["nonstream"]["added_p50_ms"] == 0.0
    assert direct["stream"]["ratio_ttfb_p50"] == 1.0
    assert all(direct["throughput"][key]["ratio"] == 1.0 for key in THROUGHPUT_KEYS)


def test_a_baseline_build_runs_side_by_side_and_targets_can_be_chosen(
    tmp_path: Path,
) -> None:
    data = run_script(
        "bench_proxy.py",
        "--quick",
        "--skip-litellm",
        "--baseline-src",
        str(REPO),  # this very tree as the "before": the columns must simply exist
        "--targets",
        "mb-pass,base-pass",
        "--think-ms",
        "5",
        *SMOKE_CPU,
        workdir=tmp_path,
    )
    assert list(data["results"]) == ["direct", "mb-pass", "base-pass"]
    assert data["results"]["base-pass"]["rss"]["process"] == "memorybridge-base"
    assert data["results"]["mb-pass"]["rss"]["process"] == "memorybridge"
    assert _positive(data["results"]["base-pass"]["nonstream"]["p50_ms"])
    assert data["skipped"]["mb-fresh"] == "not selected (--targets)"
    assert data["meta"]["baseline_src"] == str(REPO)
    assert data["meta"]["plan"]["think_ms"] == 5


def test_a_baseline_given_as_its_src_folder_is_refused() -> None:
    """Given `<repo>/src`, the baseline would silently run the installed (current) code."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_proxy.py"),
            "--baseline-src",
            str(REPO / "src"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no src/memory_bridge under" in done.stderr
