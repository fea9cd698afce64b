"""The relevance floor: whether any of a request's candidates is about the request at all.

The fused score is rank-based (RRF), so it says which items are best, never whether the best
is any good: an unrelated question still gets its top items. The floor uses the scores that
are comparable across queries: the cosine of the query and the item (dense) and the fraction
of the query's keyword terms the item contains (sparse coverage). A request's ranked
candidates are injected only when at least one of them clears the floor on one of its scores
(the gate); then each candidate must still clear the lower noise floor (a fraction of the
floor) or belong to an exchange (event) of which a message does, so the clearly unrelated
tail of a related request stays out but the reply to a matching question does not.
Candidates without any comparable score (a source that gives plain memories) are not judged.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_bridge.core.candidates import Candidate, Scored
from memory_bridge.tenancy.ranking import Ranking

__all__ = ["clears", "gate_open"]


def clears(candidate: Candidate, rules: Ranking, share: float = 1.0) -> bool | None:
    """Whether the candidate reaches `share` of the floor on any of its comparable scores;
    None when it has none."""
    dense, coverage = candidate.dense_score, candidate.sparse_coverage
    if dense is None and coverage is None:
        return None
    if dense is not None and (rules.dense_floor <= 0 or dense >= rules.dense_floor * share):
        return True
    if coverage is None:
        return False
    # A question may always miss one of its terms ("What kayak did I buy?" against "I bought
    # a red kayak": "buy" is not "bought"): with two or three terms, the floor is all but one.
    terms = candidate.query_terms
    floor = min(rules.sparse_floor, (terms - 1) / terms) if terms >= 2 else rules.sparse_floor
    return rules.sparse_floor <= 0 or coverage >= floor * share - 1e-9


def gate_open(ranked: Sequence[Scored], rules: Ranking) -> bool:
    """True when some candidate clears the floor, or there are candidates and none can be
    judged by it; False without candidates (nothing cleared it)."""
    judged = [clears(s.candidate, rules) for s in ranked]
    return any(judged) or (bool(judged) and all(j is None for j in judged))
