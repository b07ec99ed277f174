"""Benchmarks: ``distrain bench <name>`` (see :mod:`distrain.tools.bench.cli`)."""
