"""The figures of every target, each against `direct`'s: what the table and the JSON show."""

from __future__ import annotations

from typing import Any

from bench.proxy.plan import CONCURRENCIES, DELAYS_MS, Target
from bench.proxy.stats import Samples, Throughput, percentile, ratio, rounded


def _nonstream_figures(ns: Samples, base_ns: Samples) -> dict[str, Any]:
    ns_fig: dict[str, Any] = {"n": len(ns.total), "errors": ns.errors}
    for q in (50, 95, 99):
        value = percentile(ns.total, q)
        base = percentile(base_ns.total, q)
        ns_fig[f"p{q}_ms"] = rounded(value)
        ns_fig[f"added_p{q}_ms"] = rounded(value - base)
        ns_fig[f"ratio_p{q}"] = ratio(value, base)
    ns_fig["mean_ms"] = rounded(sum(ns.total) / len(ns.total)) if ns.total else None
    ns_fig["round_p50_ms"] = ns.round_p50
    ns_fig["error_sample"] = ns.error_sample
    if ns.overhead:
        ns_fig["proxy_reported_overhead_p50_ms"] = rounded(percentile(ns.overhead, 50))
    return ns_fig


def _stream_figures(st: Samples, base_st: Samples) -> dict[str, Any]:
    st_fig: dict[str, Any] = {"n": len(st.total), "errors": st.errors}
    for metric, values, base_values in (
        ("ttfb", st.ttfb, base_st.ttfb),
        ("total", st.total, base_st.total),
    ):
        for q in (50, 95):
            value = percentile(values, q)
            base = percentile(base_values, q)
            st_fig[f"{metric}_p{q}_ms"] = rounded(value)
            st_fig[f"added_{metric}_p{q}_ms"] = rounded(value - base)
            st_fig[f"ratio_{metric}_p{q}"] = ratio(value, base)
    st_fig["error_sample"] = st.error_sample
    if st.overhead:
        st_fig["proxy_reported_overhead_p50_ms"] = rounded(percentile(st.overhead, 50))
    return st_fig


def _throughput_figures(
    name: str, throughput: dict[tuple[str, int, int], Throughput]
) -> dict[str, Any]:
    tp_fig: dict[str, Any] = {}
    for delay in DELAYS_MS:
        for conc in CONCURRENCIES:
            tp = throughput.get((name, conc, delay), Throughput())
            base_tp = throughput.get(("direct", conc, delay), Throughput())
            tp_fig[f"c{conc}_d{delay}"] = {
                "rps": rounded(tp.rps, 1),
                "ratio": ratio(tp.rps, base_tp.rps),
                "round_rps": tp.round_rps,
                "errors": tp.errors,
                "error_sample": tp.error_sample,
            }
    return tp_fig


def _rss_figures(
    target: Target, rss: dict[str, dict[str, Any]], peaks: dict[str, float]
) -> dict[str, Any]:
    rss_fig: dict[str, Any] = {
        "process": target.process,
        "peak_mb": round(peaks[target.process], 1),
    }
    rss_fig["ratio_peak"] = ratio(peaks[target.process], peaks["fake-upstream"])
    rss_fig.update(rss.get(target.process, {}))
    return rss_fig


def _cpu_figures(name: str, cpu: dict[str, dict[str, Any]]) -> dict[str, Any]:
    cpu_fig = dict(cpu[name])
    for kind in ("json", "stream"):
        cpu_fig[f"ratio_{kind}"] = ratio(cpu_fig[f"{kind}_ms"], cpu["direct"][f"{kind}_ms"])
    return cpu_fig


def summarise(
    targets: list[Target],
    nonstream: dict[str, Samples],
    stream: dict[str, Samples],
    throughput: dict[tuple[str, int, int], Throughput],
    rss: dict[str, dict[str, Any]],
    peaks: dict[str, float],
    cpu: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    return {
        t.name: {
            "cpu": _cpu_figures(t.name, cpu),
            "nonstream": _nonstream_figures(nonstream[t.name], nonstream["direct"]),
            "stream": _stream_figures(stream[t.name], stream["direct"]),
            "throughput": _throughput_figures(t.name, throughput),
            "rss": _rss_figures(t, rss, peaks),
        }
        for t in targets
    }
