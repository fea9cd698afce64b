"""The table `bench_placement.py` prints, and where each build's code comes from."""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.placement.conversation import Conversation
from bench.placement.prefix import summary
from bench.placement.prompts import TARGET, TARGET_FROM_TURN
from bench.processes import log


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def render_table(conversations: list[Conversation]) -> str:
    by_name = {c.name: c for c in conversations}
    current = by_name["current"]
    columns = [
        "current",
        "old",
        "current-window-20",
        "old-window-20",
        "current-reference-first",
    ]
    present = [c for c in columns if c in by_name]
    head = ["turn", "prompt bytes (current)", *present, "ceiling (current)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, turn in enumerate(current.turns):
        cells = [str(turn["turn"]), str(turn["bytes"])]
        for name in present:
            record = by_name[name].turns[i] if i < len(by_name[name].turns) else {}
            cells.append(pct(record.get("share")))
        cells.append(pct(turn.get("carried_share")))
        lines.append("| " + " | ".join(cells) + " |")
    for label, key in ((f"min from turn {TARGET_FROM_TURN}", "min"), ("median", "median")):
        cells = [f"**{label}**", ""]
        cells += [f"**{pct(summary(by_name[n].turns)[key])}**" for n in present]
        late = [t["carried_share"] for t in current.turns if t["turn"] >= TARGET_FROM_TURN]
        value = (min(late) if key == "min" else statistics.median(late)) if late else None
        lines.append("| " + " | ".join([*cells, pct(value)]) + " |")
    return "\n".join(lines)


def build_source(src: Path | None) -> dict[str, Any]:
    """Where a build's code comes from, and its commit (with `+dirty` if src/ has changes)."""
    if src is None:
        spec = importlib.util.find_spec("memory_bridge")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return {"src": None, "commit": None}
        src = Path(origin).parent.parent
    info: dict[str, Any] = {"src": str(src), "commit": None}
    git = shutil.which("git")
    if git is not None:
        rev = subprocess.run(  # noqa: S603 — our own argv
            [git, "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        if rev.returncode == 0:
            dirty = subprocess.run(  # noqa: S603 — our own argv
                [git, "-C", str(src), "status", "--porcelain", "--", "."],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            info["commit"] = rev.stdout.strip() + ("+dirty" if dirty else "")
    return info


def print_report(
    table: str, conversations: list[Conversation], meta: dict[str, Any], problems: list[str]
) -> None:
    print(table)
    for conv in conversations:
        s = summary(conv.turns)
        verdict = {True: "met", False: "not met", None: "n/a"}[s["target_met"]]
        print(
            f"- {conv.name} ({conv.build} build {meta['builds'][conv.build]['commit']}, "
            f"history window {conv.window}, placement {conv.placement}): "
            f"from turn {TARGET_FROM_TURN} min "
            f"{pct(s['min'])}, median {pct(s['median'])}; target ≥ {TARGET:.0%} {verdict}"
        )
    print(
        f"- share = longest common byte prefix with the previous turn's prompt / this "
        f"prompt's bytes, on {meta['serialization']}; ceiling = bytes of messages already "
        f"sent byte-identical in the previous turn's prompt"
    )
    print(
        f"- client system prompt {meta['client_system_prompt_bytes']} B, curated "
        f"{meta['curated_bytes']['memory']} + {meta['curated_bytes']['user']} B, replies "
        f"{meta['reply_bytes']} B, {meta['gateway_hits']} Gateway hits per turn, "
        f"{meta['seconds']:.0f} s in all"
    )
    for problem in problems:
        print(f"- warning: {problem}")


def write_json(
    path: Path,
    table: str,
    conversations: list[Conversation],
    meta: dict[str, Any],
    problems: list[str],
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "conversations": {
            c.name: {
                "build": c.build,
                "window": c.window,
                "placement": c.placement,
                "layers": c.layers,
                "summary": summary(c.turns),
                "turns": c.turns,
            }
            for c in conversations
        },
        "problems": problems,
        "table": table,
    }
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    log(f"figures written to {path}")
