"""Benchmarks. Each prints its figures next to a baseline measured in the same run.

Run ``python -m bench.claims`` or ``python -m bench.ingest`` (``--quick`` for a reduced
version). They are measurements, not tests: targets are reported as PASS/MISS and never
change the exit code.
"""
