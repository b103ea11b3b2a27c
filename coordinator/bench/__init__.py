"""Benchmarks behind ``rhaipool bench`` (never collected by pytest).

Each one prints its figures next to a baseline measured in the same run:
``pool`` (round trip vs raw pyzmq and the in-process engine, throughput,
replacement time), ``regions`` (render through the pool vs in-process),
``providers`` (inferences at 64/256/1 024 callers vs a raw-socket client and plain httpx, with
each baseline's health), ``curves`` (CPU per call and memory vs concurrency, ctx size, scripts)
and ``binding`` (rhai-python's own figures). How to run each and the latest figures: BENCHMARKS.md.
"""
