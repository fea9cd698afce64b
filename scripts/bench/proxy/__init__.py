"""The parts of `scripts/bench_proxy.py` (see `bench/__init__.py` for the map)."""
