"""Helpers of `scripts/bench_proxy.py`: the fake upstream and the load generator.

Each module also runs on its own as a separate process (`python scripts/bench/<module>.py`).
"""
