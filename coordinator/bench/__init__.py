"""Benchmarks behind ``rhaipool bench`` (never collected by pytest).

Each one prints its figures next to a baseline measured in the same run:
``pool`` (round trip vs raw pyzmq and the in-process engine, throughput,
replacement time), ``regions`` (render through the pool vs in-process),
``providers`` (256 concurrent inferences vs plain httpx), and ``binding``
(rhai-python's own figures, ``rhaipool bench binding``).
"""
