"""The parts of `scripts/bench_placement.py` (see `bench/__init__.py` for the map)."""
