"""The bound on open shards: least recently used idle shards parked first, busy ones skipped."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memory_bridge.vectors.edge_slots import OpenShards


@dataclass(eq=False)
class Shard:
    name: str
    slots: OpenShards
    busy: bool = False
    is_open: bool = False

    def open(self) -> None:
        self.slots.make_room(self)
        self.is_open = True
        self.slots.opened(self)

    def try_park(self) -> bool:
        if self.busy:
            return False
        self.is_open = False
        self.slots.closed(self, parked=True)
        return True


def _open(shards: list[Shard]) -> list[str]:
    return [s.name for s in shards if s.is_open]


def test_the_least_recently_used_shard_is_parked_first() -> None:
    slots = OpenShards(2)
    a, b, c = (Shard(n, slots) for n in "abc")
    a.open()
    b.open()
    slots.used(a)  # b is now the least recently used
    c.open()
    assert _open([a, b, c]) == ["a", "c"]
    assert len(slots) == 2 and slots.parked == 1


def test_a_busy_shard_is_skipped_and_the_bound_comes_back_on_the_next_opening() -> None:
    slots = OpenShards(1)
    a, b, c = (Shard(n, slots) for n in "abc")
    a.open()
    a.busy = True
    b.open()  # nothing idle to park: over the bound, never waiting
    assert _open([a, b]) == ["a", "b"]
    a.busy = False
    c.open()
    assert _open([a, b, c]) == ["c"]
    assert len(slots) == 1


def test_a_closed_shard_leaves_the_count_and_zero_means_no_bound() -> None:
    slots = OpenShards(2)
    a = Shard("a", slots)
    a.open()
    slots.closed(a)
    assert len(slots) == 0 and slots.parked == 0

    unbounded = OpenShards(0)
    many = [Shard(str(i), unbounded) for i in range(50)]
    for shard in many:
        shard.open()
    assert len(unbounded) == 50 and unbounded.parked == 0
    with pytest.raises(ValueError, match=">= 0"):
        OpenShards(-1)


def test_parked_shards_are_counted_until_they_reopen_or_close_for_good() -> None:
    reopened: list[int] = []
    slots = OpenShards(1, on_reopen=lambda: reopened.append(1))
    a, b = Shard("a", slots), Shard("b", slots)
    a.open()
    b.open()  # parks a
    assert slots.state() == (1, 1) and slots.reopens == 0
    a.open()  # a reopens, b parks
    assert slots.state() == (1, 1) and slots.reopens == 1 and reopened == [1]
    slots.closed(b)  # b erased while parked: no longer counted anywhere
    assert slots.state() == (1, 0)
    b.open()  # a new shard, not a reopen
    assert slots.state() == (1, 1) and slots.reopens == 1
