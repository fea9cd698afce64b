"""Long-lived objects are frozen out of the cyclic collector's full passes."""

from __future__ import annotations

import gc

from memory_bridge.core.heap import freeze_long_lived


def test_objects_allocated_so_far_leave_the_collected_generations() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: tracked by the collector

    long_lived = [Node() for _ in range(1000)]
    before = gc.get_freeze_count()
    freeze_long_lived()
    assert gc.get_freeze_count() >= before + len(long_lived)
    assert all(not any(n is obj for obj in gc.get_objects()) for n in long_lived[:3])
