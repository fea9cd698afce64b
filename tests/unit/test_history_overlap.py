"""The resent-conversation matcher: what is injected and what is stored."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memory_bridge.sources.history import overlap


def test_nothing_stored_or_nothing_sent() -> None:
    assert overlap([], ["u1"]) == (0, 0)
    assert overlap(["u1", "a1"], []) == (0, 0)


def test_a_client_that_resends_everything() -> None:
    assert overlap(["u1", "a1"], ["u1", "a1", "u2"]) == (2, 2)


def test_a_stateless_client_sends_only_the_new_message() -> None:
    assert overlap(["u1", "a1"], ["u2"]) == (0, 0)


def test_a_client_with_a_longer_memory_than_the_window() -> None:
    # The window holds the last two; the request carries four earlier ones as well.
    assert overlap(["u2", "a2"], ["u1", "a1", "u2", "a2", "u3"]) == (2, 4)


def test_a_client_that_trimmed_its_own_context() -> None:
    assert overlap(["u0", "a0", "u1", "a1"], ["u1", "a1", "u2"]) == (2, 2)


def test_a_repeated_short_message_is_new_each_time() -> None:
    stored = ["ok", "sure", "ok", "sure"]
    assert overlap(stored, ["ok"]) == (0, 0)
    assert overlap(stored, ["ok", "sure", "ok", "sure", "ok"]) == (4, 4)


def test_the_latest_occurrence_wins_among_equals() -> None:
    assert overlap(["a"], ["u", "a", "u", "a", "u"]) == (1, 4)


@given(
    earlier=st.lists(st.sampled_from(["u:ok", "a:sure", "u:hi", "a:hey", "t:42"]), max_size=12),
    new=st.lists(st.sampled_from(["u:ok", "u:hi", "t:42"]), max_size=4),
    window=st.integers(min_value=1, max_value=14),
)
def test_resending_the_conversation_never_duplicates(
    earlier: list[str], new: list[str], window: int
) -> None:
    """A client that resends its whole conversation gets nothing injected twice and exactly its
    new messages stored, however often short messages repeat. A stored conversation always
    ends with the assistant's reply, and new messages are user or tool messages."""
    history = [*earlier, "a:last reply"]
    stored = history[-window:]
    request = history + new
    k, p = overlap(stored, request)
    assert k == len(stored)  # the whole window is found: nothing is injected again
    assert request[p:] == new  # and exactly the new messages are stored


@given(
    stored=st.lists(st.sampled_from(["u:ok", "a:sure"]), min_size=1, max_size=8),
    new=st.lists(st.sampled_from(["u:ok", "u:hi"]), min_size=1, max_size=3),
)
def test_a_stateless_client_gets_the_whole_window(stored: list[str], new: list[str]) -> None:
    assert overlap([*stored, "a:last"], new) == (0, 0)
