"""The tables `bench_recall.py` prints: per conversation, category and variant, and the product
beside Mem0 and the dataset README's reference figures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.locomo import CATEGORIES, KS, table

# The dataset README's figures on this split (all-MiniLM-L6-v2, 883 questions).
REFERENCES = {
    name: dict(zip(("turn@5", "turn@10", "turn@20", "sess@10"), figures, strict=True))
    for name, figures in (
        ("reference dense MiniLM", (0.393, 0.489, 0.581, 0.776)),
        ("reference BM25", (0.439, 0.517, 0.605, 0.831)),
        ("reference RRF hybrid", (0.483, 0.588, 0.682, 0.849)),
    )
}


def variants_table(variants: Sequence[dict[str, Any]]) -> str:
    cats = list(CATEGORIES.values())
    head = ["variant", "setting", *(f"turn@{k}" for k in KS), "sess@10"]
    head += [f"{c} turn@10" for c in cats] + ["tokens/req", "p50 ms", "p95 ms"]
    head.append("off-topic nothing injected")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in variants:
        o = v["overall"]
        cells = [v["name"], v["describe"], *(f"{o[f'turn@{k}']:.3f}" for k in KS)]
        cells.append(f"{o['sess@10']:.3f}")
        cells += [
            f"{v['by_category'][c]['turn@10']:.3f}" if c in v["by_category"] else "-" for c in cats
        ]
        cells += [f"{o['injected_tokens']:.0f}", f"{o['p50_ms']:.1f}", f"{o['p95_ms']:.1f}"]
        off = v.get("off_topic")
        cells.append(f"{off['nothing_injected']:.1%}" if off else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def off_topic_table(product: dict[str, Any]) -> str:
    """On-topic (the conversation's own questions) against off-topic (the others')."""
    on, off = product["overall"], product["off_topic"]
    head = "| questions asked | n | nothing injected | injected tokens / request |"
    return "\n".join(
        [
            head,
            "|---|---|---|---|",
            f"| own conversation's | {on['questions']} | {on['nothing_injected']:.1%} "
            f"| {on['injected_tokens']:.0f} |",
            f"| other conversations' (off-topic) | {off['questions']} "
            f"| {off['nothing_injected']:.1%} | {off['injected_tokens']:.0f} |",
        ]
    )


def comparison(overall: dict[str, Any], mem0: dict[str, Any] | None) -> str:
    names = ["episodic (product)", *(["Mem0 dense (measured)"] if mem0 else []), *REFERENCES]
    lines = ["| figure | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for key in REFERENCES["reference dense MiniLM"]:
        cells = [f"{overall[key]:.3f}"]
        if mem0:
            cells.append(f"{mem0['overall'][key]:.3f}")
        cells += [f"{ref[key]:.3f}" for ref in REFERENCES.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    parts = []
    if "overall" in report:
        rows = [*report["conversations"].items(), ("**overall**", report["overall"])]
        parts += [
            table(rows, "conversation"),
            table(list(report["by_category"].items()), "category"),
            variants_table(report["variants"]),
            *(
                [off_topic_table(report["variants"][0])]
                if "off_topic" in report["variants"][0]
                else []
            ),
            comparison(report["overall"], report.get("mem0")),
        ]
        if "mem0" in report:
            mem0 = report["mem0"]
            parts.append(
                table(
                    [("Mem0 dense", mem0["overall"]), *mem0["by_category"].items()],
                    "Mem0 (before)",
                )
            )
    if "speed" in report:
        from bench import recall_speed

        parts.append(recall_speed.table(report["speed"]))
    return "\n\n".join(parts)
