"""`distrain bench <subcommand>`: dispatch to the benchmark modules."""

from __future__ import annotations

import importlib
import sys

#: subcommand → module exposing main(argv) -> int
SUBCOMMANDS: dict[str, str] = {"comm": "distrain.bench.comm", "scaling": "distrain.bench.scaling"}


def main(argv: list[str]) -> int:
    """Run `distrain bench <sub> ...`; returns the subcommand's exit code."""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: distrain bench {" + ",".join(SUBCOMMANDS) + "} ...")
        return 0 if argv else 2
    name = argv[0]
    if name not in SUBCOMMANDS:
        print(f"distrain bench: error: unknown subcommand {name!r} (choose from {', '.join(SUBCOMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name])
    return int(module.main(argv[1:]) or 0)
