"""The injected history window slides in steps: byte-identical (only growing) for half a window
of turns, never more than the window's count or the token budget, never an orphan tool result."""

from __future__ import annotations

import itertools

import pytest

from memory_bridge.core.messages import Message
from memory_bridge.sources.history import stepped_start
from memory_bridge.storage.sessions import StoredMessage


def _stored(i: int, tokens: int = 10, role: str = "user") -> StoredMessage:
    if role == "tool":
        message = Message(role="tool", content=f"m{i}", tool_call_id="c")
    else:
        message = Message(role=role, content=f"m{i}")  # type: ignore[arg-type]
    return StoredMessage(message, f"id{i}", tokens)


def _drive(turns: int, size: int, budget: int, tokens: int = 10) -> list[list[int]]:
    """What each turn injects (indexes of the session's messages), two messages a turn."""
    session: list[StoredMessage] = []
    anchor: str | None = None
    injected = []
    for _ in range(turns):
        window = session[-size:]
        start = stepped_start(window, anchor, len(window) < size, size, budget)
        if start < len(window):
            anchor = window[start].identity
        first = len(session) - len(window)
        injected.append(list(range(first + start, len(session))))
        session += [_stored(len(session), tokens), _stored(len(session) + 1, tokens)]
    return injected


@pytest.mark.parametrize(("size", "budget"), [(20, 8000), (6, 8000), (20, 95), (7, 8000)])
def test_the_window_keeps_its_start_for_many_turns_within_its_bounds(
    size: int, budget: int
) -> None:
    turns = _drive(40, size, budget)
    starts = [t[0] for t in turns if t]
    moves = sum(1 for a, b in itertools.pairwise(starts) if a != b)
    for turn in turns:
        assert len(turn) <= size and 10 * len(turn) <= budget
        assert turn == list(range(turn[0], turn[0] + len(turn))) if turn else True
    # The newest messages are always there, and at least half a window of them.
    for i, turn in enumerate(turns[1:], 1):
        assert turn[-1] == 2 * i - 1
        assert len(turn) >= min(2 * i, size // 2, budget // 20)
    # Today's window (last `size` messages) moves on every turn once full; this one every
    # half window (count or budget) of messages.
    per_move = min(size, budget // 10) // 2
    assert moves <= 2 * 40 // max(1, per_move)
    assert moves >= 1


def test_a_twenty_message_window_moves_every_sixth_turn() -> None:
    starts = [t[0] for t in _drive(30, 20, 8000)[1:]]  # turns 2..30
    changes = [i + 3 for i, (a, b) in enumerate(itertools.pairwise(starts)) if a != b]
    # Full at turn 11 (20 messages); then 10 kept, grown back to 20 over five turns.
    assert changes == [12, 18, 24, 30]


def test_never_over_budget_even_when_the_anchor_grows_past_it() -> None:
    window = [_stored(i, tokens=30) for i in range(6)]
    # The anchor is still in the window, but everything from it is 180 tokens > 100.
    start = stepped_start(window, "id0", False, 20, 100)
    assert sum(s.tokens for s in window[start:]) <= 50  # re-anchored within half the budget
    assert start == 5
    # One message larger than half the budget still goes in when it fits the whole budget.
    big = [_stored(0, 10), _stored(1, 80)]
    assert stepped_start(big, None, False, 20, 85) == 1
    assert stepped_start(big, None, False, 20, 100) == 0
    assert stepped_start(big, None, False, 20, 70) == 2  # nothing fits


def test_a_cut_never_starts_with_a_tool_result() -> None:
    window = [
        _stored(0),
        _stored(1, role="assistant"),
        _stored(2, role="tool"),
        _stored(3, role="tool"),
        _stored(4, role="assistant"),
        _stored(5),
    ]
    assert stepped_start(window, None, False, 8, 8000) == 4  # keep 4 -> starts at a tool
    assert stepped_start(window, "id2", False, 8, 8000) == 4


def test_a_short_session_is_injected_whole_without_any_anchor() -> None:
    window = [_stored(i) for i in range(5)]
    assert stepped_start(window, None, True, 20, 8000) == 0
    assert stepped_start(window, "gone", True, 20, 8000) == 0
