"""Benchmark scripts (run as `python -m bench.NAME`); each prints one JSON object."""
