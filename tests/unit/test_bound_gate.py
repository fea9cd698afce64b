"""The backlog's `BoundGate`: a turn counts the scheduled jobs only when this process's last
count plus the turns since could reach a bound, or the count is too old."""

from __future__ import annotations

from memory_bridge.events.backlog import BoundGate, Bounds

BOUNDS = Bounds(per_token=4, overall=100, coalescible=frozenset({"episodic"}))


def _turn(gate: BoundGate, token_id: int, counts: tuple[int, int] | None) -> bool:
    """One turn: whether it counted; `counts` is what its transaction would read."""
    count_it, seq, all_seq = gate.decide(token_id)
    if count_it and counts is not None:
        gate.counted(token_id, counts, (seq, all_seq))
    return count_it


def test_a_token_counts_first_then_only_when_its_bound_may_be_reached() -> None:
    gate = BoundGate(BOUNDS, recount=3600)
    assert _turn(gate, 1, (0, 0))  # nothing known yet
    assert not _turn(gate, 1, None)  # 1 + 1 of 4
    assert not _turn(gate, 1, None)  # 1 + 2 of 4
    assert _turn(gate, 1, (3, 3))  # 1 + 3 may be 4: counted (3 open, the worker did none)
    assert _turn(gate, 1, (4, 4))  # at the bound: every turn counts
    assert _turn(gate, 1, (0, 0))  # the worker caught up: the count says so ...
    assert not _turn(gate, 1, None)  # ... and the next turns skip again
    assert _turn(gate, 2, (0, 5))  # another token counts for itself


def test_the_overall_bound_makes_every_token_count() -> None:
    gate = BoundGate(Bounds(per_token=100, overall=3, coalescible=frozenset()), recount=3600)
    assert _turn(gate, 1, (0, 0))
    assert not _turn(gate, 1, None)  # everyone: 1 + 1 of 3
    assert _turn(gate, 1, (2, 2))  # everyone: 1 + 2 may be 3


def test_an_old_count_is_counted_again() -> None:
    gate = BoundGate(BOUNDS, recount=0.0)  # another process may have enqueued meanwhile
    assert _turn(gate, 1, (0, 0))
    assert _turn(gate, 1, (1, 1))
