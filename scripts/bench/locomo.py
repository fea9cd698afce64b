"""LoCoMo for `scripts/bench_recall.py`: the data (turns by session, repaired evidence) and the
retrieval metric of `../shared/data/locomo/README.md` (turn and session recall at k, latency).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
COLUMNS = [f"turn@{k}" for k in KS] + [f"sess@{k}" for k in KS]
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str  # "<speaker>: <text>" plus " [shares <caption>]": what is stored


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # repaired dia ids, all present in the conversation


@dataclass(slots=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    session_dates: dict[int, float] = field(default_factory=dict)  # epoch seconds (UTC)
    dropped_questions: int = 0  # categories 1-4 with no usable evidence
    repaired_ids: int = 0
    dropped_ids: int = 0

    def sessions(self) -> dict[int, list[Turn]]:
        """The turns of each session, in order; sessions in order."""
        out: dict[int, list[Turn]] = {}
        for turn in self.turns:
            out.setdefault(turn.session, []).append(turn)
        return out


@dataclass(slots=True)
class Scored:
    category: int
    turn: dict[int, float] = field(default_factory=dict)
    sess: dict[int, float] = field(default_factory=dict)
    latency_ms: float = 0.0
    returned: int = 0  # results the search gave


def normalize_id(raw: str) -> str | None:
    match = _EVIDENCE.fullmatch(raw.strip())
    if match is None:
        return None
    return f"D{int(match.group(1))}:{int(match.group(2))}"


def repair_evidence(entries: Sequence[str], known: set[str]) -> tuple[list[str], int, int]:
    """Split entries such as "D8:6; D9:17", repair "D:11:26" / "D30:05", drop unknown ids.
    Returns (ids in order, without duplicates; how many were repaired; how many dropped)."""
    out: list[str] = []
    repaired = dropped = 0
    for entry in entries:
        parts = [p for p in re.split(r"[;,\s]+", str(entry)) if p]
        if len(parts) != 1:
            repaired += 1
        for part in parts:
            dia_id = normalize_id(part)
            if dia_id is None or dia_id not in known:
                dropped += 1
                continue
            if dia_id != part and len(parts) == 1:
                repaired += 1
            if dia_id not in out:
                out.append(dia_id)
    return out, repaired, dropped


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares {caption}]"
    return text


def parse_date(raw: str) -> float:
    return dt.datetime.strptime(raw.strip(), _DATE_FORMAT).replace(tzinfo=dt.UTC).timestamp()


def load(path: Path) -> list[Conversation]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for item in raw:
        conv = item["conversation"]
        turns: list[Turn] = []
        dates: dict[int, float] = {}
        sessions = sorted(
            (int(m.group(1)), key)
            for key in conv
            if (m := _SESSION_KEY.fullmatch(key)) and isinstance(conv[key], list)
        )
        for number, key in sessions:
            when = conv.get(f"{key}_date_time")
            if isinstance(when, str):
                dates[number] = parse_date(when)
            for turn in conv[key]:
                dia_id = normalize_id(turn["dia_id"]) or turn["dia_id"]
                turns.append(Turn(dia_id, number, str(turn["speaker"]), turn_text(turn)))
        known = {t.dia_id for t in turns}
        out = Conversation(str(item["sample_id"]), turns, [], session_dates=dates)
        for qa in item["qa"]:
            category = int(qa.get("category", 0))
            if category not in CATEGORIES:
                continue
            evidence, repaired, dropped = repair_evidence(qa.get("evidence") or [], known)
            out.repaired_ids += repaired
            out.dropped_ids += dropped
            if not evidence:
                out.dropped_questions += 1
                continue
            out.questions.append(Question(str(qa["question"]), category, tuple(evidence)))
        conversations.append(out)
    return conversations


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":", 1)[0])


# ---- metric --------------------------------------------------------------------------


def score(question: Question, ranked: Sequence[str], latency_ms: float) -> Scored:
    evidence = set(question.evidence)
    evidence_sessions = {session_of(e) for e in evidence}
    out = Scored(question.category, latency_ms=latency_ms, returned=len(ranked))
    for k in KS:
        top = ranked[:k]
        out.turn[k] = len(evidence & set(top)) / len(evidence)
        sessions = {session_of(d) for d in top}
        out.sess[k] = len(evidence_sessions & sessions) / len(evidence_sessions)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(scored: Sequence[Scored]) -> dict[str, Any]:
    n = len(scored)
    out: dict[str, Any] = {"questions": n}
    for k in KS:
        out[f"turn@{k}"] = round(sum(s.turn[k] for s in scored) / n, 4) if n else 0.0
    for k in KS:
        out[f"sess@{k}"] = round(sum(s.sess[k] for s in scored) / n, 4) if n else 0.0
    out["mean_results"] = round(sum(s.returned for s in scored) / n, 2) if n else 0.0
    latencies = [s.latency_ms for s in scored]
    out["p50_ms"] = round(percentile(latencies, 50), 2)
    out["p95_ms"] = round(percentile(latencies, 95), 2)
    return out


def by_category(scored: Sequence[Scored]) -> dict[str, dict[str, Any]]:
    return {
        CATEGORIES[c]: summarize([s for s in scored if s.category == c])
        for c in CATEGORIES
        if any(s.category == c for s in scored)
    }


def table(rows: Sequence[tuple[str, dict[str, Any]]], label: str) -> str:
    head = [label, "questions", *COLUMNS, "p50 ms", "p95 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in rows:
        cells = [name, str(s["questions"]), *(f"{s[c]:.3f}" for c in COLUMNS)]
        cells += [f"{s['p50_ms']:.1f}", f"{s['p95_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
