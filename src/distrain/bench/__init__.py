"""Benchmarks: ``distrain bench <name>`` (see :mod:`distrain.bench.cli`)."""
