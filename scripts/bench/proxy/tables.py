"""The Markdown table `bench_proxy.py` prints: one column per target, one section per kind of
figure, each figure with its ratio to `direct`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.proxy.plan import CONCURRENCIES, DELAYS_MS

# Called as cell(name, figures); `...` lets a lambda bind its loop variables as defaults.
Cell = Callable[..., str]


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}"


def _with_ratio(value: Any, ratio: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f} ({ratio:.2f}×)" if ratio is not None else f"{value:.{digits}f}"


def _added(value: Any) -> str:
    return "—" if value is None else f"{value:+.2f}"


@dataclass
class _Grid:
    results: dict[str, dict[str, Any]]
    columns: list[str]  # the measured targets, then those left out ("n/a")

    def row(self, label: str, cell: Cell) -> str:
        cells = []
        for name in self.columns:
            if name not in self.results:
                cells.append("n/a")
            else:
                cells.append(cell(name, self.results[name]))
        return f"| {label} | " + " | ".join(cells) + " |"

    def section(self, title: str) -> str:
        return f"| **{title}** |" + " |" * len(self.columns)


def _latency_rows(grid: _Grid) -> list[str]:
    lines = [grid.section("Non-streaming, concurrency 1 (ms; × direct)")]
    for q in (50, 95, 99):
        lines.append(
            grid.row(
                f"latency p{q}",
                lambda n, r, q=q: _with_ratio(
                    r["nonstream"][f"p{q}_ms"], r["nonstream"][f"ratio_p{q}"]
                ),
            )
        )
    for q in (50, 95):
        lines.append(
            grid.row(f"added p{q}", lambda n, r, q=q: _added(r["nonstream"][f"added_p{q}_ms"]))
        )
    lines.append(
        grid.row(
            "proxy-reported pre-forward p50",
            lambda n, r: _num(r["nonstream"].get("proxy_reported_overhead_p50_ms")),
        )
    )
    return lines


def _stream_rows(grid: _Grid) -> list[str]:
    lines = [grid.section("Streaming, 200 chunks, concurrency 1 (ms; × direct)")]
    for metric, label in (("ttfb", "first byte"), ("total", "whole stream")):
        for q in (50, 95):
            lines.append(
                grid.row(
                    f"{label} p{q}",
                    lambda n, r, m=metric, q=q: _with_ratio(
                        r["stream"][f"{m}_p{q}_ms"], r["stream"][f"ratio_{m}_p{q}"]
                    ),
                )
            )
        lines.append(
            grid.row(
                f"added {label} p50",
                lambda n, r, m=metric: _added(r["stream"][f"added_{m}_p50_ms"]),
            )
        )
    return lines


def _throughput_rows(grid: _Grid) -> list[str]:
    lines = [grid.section("Throughput, non-streaming (requests/s; × direct)")]
    for delay in DELAYS_MS:
        for conc in CONCURRENCIES:
            key = f"c{conc}_d{delay}"
            lines.append(
                grid.row(
                    f"c={conc}, upstream delay {delay} ms",
                    lambda n, r, k=key: _with_ratio(
                        r["throughput"][k]["rps"], r["throughput"][k]["ratio"], 0
                    ),
                )
            )
    return lines


def _cpu_rows(grid: _Grid) -> list[str]:
    return [
        grid.section("CPU time of the serving process per request (ms; × direct)"),
        grid.row(
            "non-streaming",
            lambda n, r: _with_ratio(r["cpu"]["json_ms"], r["cpu"]["ratio_json"], 3),
        ),
        grid.row(
            "200-chunk stream",
            lambda n, r: _with_ratio(r["cpu"]["stream_ms"], r["cpu"]["ratio_stream"], 3),
        ),
    ]


def _memory_rows(grid: _Grid, counts: tuple[int, int]) -> list[str]:
    results = grid.results

    def rss_cell(name: str, r: dict[str, Any], key: str) -> str:
        # Targets served by one process share its figures: shown once, under the first.
        first = next(n for n in results if results[n]["rss"]["process"] == r["rss"]["process"])
        if name != first:
            return f"(= {first})"
        value = r["rss"].get(key)
        if key == "peak_mb":
            return _with_ratio(value, r["rss"]["ratio_peak"], 0)
        if key == "growth_pct":
            return "—" if value is None else f"{value:+.1f}%"
        return _num(value, 0)

    early, late = counts
    return [
        grid.section("Memory of the serving process (MB)"),
        grid.row("peak RSS", lambda n, r: rss_cell(n, r, "peak_mb")),
        grid.row(f"RSS after {early:,} requests", lambda n, r: rss_cell(n, r, "early_mb")),
        grid.row(f"RSS after {late:,} requests", lambda n, r: rss_cell(n, r, "late_mb")),
        grid.row(f"RSS growth {early:,} → {late:,}", lambda n, r: rss_cell(n, r, "growth_pct")),
    ]


def render_table(
    results: dict[str, dict[str, Any]], skipped: dict[str, str], counts: tuple[int, int]
) -> str:
    columns = [*results, *[n for n in skipped if n not in results]]
    grid = _Grid(results, columns)
    lines = [
        "| measurement | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    lines += _latency_rows(grid)
    lines += _stream_rows(grid)
    lines += _throughput_rows(grid)
    lines += _cpu_rows(grid)
    lines += _memory_rows(grid, counts)
    return "\n".join(lines)


def error_notes(results: dict[str, dict[str, Any]]) -> list[str]:
    notes = []
    for name, r in results.items():
        for part in ("nonstream", "stream"):
            if r[part]["errors"]:
                notes.append(f"{name} {part}: {r[part]['errors']} errors {r[part]['error_sample']}")
        for key, tp in r["throughput"].items():
            if tp["errors"]:
                notes.append(f"{name} throughput {key}: {tp['errors']} errors {tp['error_sample']}")
        for kind in ("json", "stream"):
            if r["cpu"].get(f"{kind}_errors"):
                notes.append(f"{name} cpu {kind}: {r['cpu'][f'{kind}_errors']} errors")
        if r["rss"].get("errors"):
            notes.append(f"{name} rss phase: {r['rss']['errors']} errors")
    return notes
