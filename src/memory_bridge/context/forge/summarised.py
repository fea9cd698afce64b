"""The "prefer summaries" rule: when a session summary and raw turns it covers are both
candidates, the raw turns are dropped (trace reason `summarised`), so the two never both take
budget. A summary that faded (`fade`) covers nothing: it will not be injected. A summary's
lineage names the `session.appended` event ids it covers (`sources.summaries`); a raw turn's
lineage names its own event id."""

from __future__ import annotations

from collections.abc import Sequence

from memory_bridge.context.forge.fade import faded
from memory_bridge.core.candidates import Drop, Outcome, Scored
from memory_bridge.tenancy.ranking import Ranking

SUMMARY = "summary"


def drop_summarised(
    ranked: Sequence[Scored], rules: Ranking | None = None
) -> tuple[list[Scored], list[Outcome]]:
    """The candidates left, and the outcomes of the raw turns a candidate summary covers."""
    covered = {
        event_id
        for s in ranked
        if s.candidate.lineage.get("type") == SUMMARY and not (rules and faded(s, rules))
        for event_id in s.candidate.lineage.get("covers", "").split(",")
        if event_id
    }
    if not covered:
        return list(ranked), []
    left: list[Scored] = []
    dropped: list[Outcome] = []
    for s in ranked:
        lineage = s.candidate.lineage
        if lineage.get("type") != SUMMARY and lineage.get("event_id") in covered:
            dropped.append(Outcome(s, False, reason=Drop.SUMMARISED))
        else:
            left.append(s)
    return left, dropped
