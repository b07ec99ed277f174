"""`distrain bench <benchmark> ...`: dispatch to one benchmark module's main(argv)."""

from __future__ import annotations

import importlib
import sys

from distrain.cli import first_word_is

#: benchmark name → module exposing main(argv: list[str]) -> int
BENCHMARKS: dict[str, str] = {
    "comm": "distrain.tools.bench.comm",
    "scaling": "distrain.tools.bench.study.scaling",
}

USAGE = "usage: distrain bench {" + ",".join(BENCHMARKS) + "} [options]"


def main(argv: list[str]) -> int:
    """Run the named benchmark with the remaining arguments."""
    if not argv or first_word_is(argv, "-h", "--help"):
        print(USAGE)
        for name, module in BENCHMARKS.items():
            doc = (importlib.import_module(module).__doc__ or "").strip().splitlines()
            print(f"  {name:<10} {doc[0] if doc else ''}")
        return 0 if argv else 2
    name = argv[0]
    if name not in BENCHMARKS:
        print(
            f"distrain bench: error: unknown benchmark {name!r} (choose from "
            f"{', '.join(BENCHMARKS)})",
            file=sys.stderr,
        )
        return 2
    return int(importlib.import_module(BENCHMARKS[name]).main(argv[1:]) or 0)
