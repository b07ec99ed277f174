"""Where the suite's CPU went, from the lines ``DTEST_CPU_LOG=DIR`` left (tests/helpers/
cpu_log.py): totals, the files by CPU seconds, the slowest tests, and how the CPU spreads over
tests of each cost.

    DTEST_CPU_LOG=/tmp/cpu python3 -m pytest -n 3 --dist worksteal tests
    python3 scripts/suite_cpu.py /tmp/cpu [--top 25]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

#: the cost bands of a test, in CPU seconds (the last is open)
BANDS = (1.0, 5.0, 10.0, 20.0, 50.0)


def read(folder: Path) -> list[dict]:
    """Every test's line from every xdist worker's file."""
    return [json.loads(ln) for f in sorted(folder.glob("*.jsonl")) for ln in f.open() if ln.strip()]


def by_file(rows: list[dict]) -> list[tuple[str, int, float, float]]:
    """(file, tests, CPU s, wall s), the most CPU first."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        s = sums[r["id"].split("::")[0]]
        s[0] += 1
        s[1] += r["cpu"]
        s[2] += r["wall"]
    return sorted(((f, int(s[0]), s[1], s[2]) for f, s in sums.items()), key=lambda x: -x[2])


def bands(rows: list[dict]) -> list[tuple[str, int, float]]:
    """(band, tests, CPU s) for each cost band of BANDS."""
    edges = (0.0, *BANDS, float("inf"))
    out = []
    for low, high in zip(edges, edges[1:], strict=False):
        inside = [r["cpu"] for r in rows if low <= r["cpu"] < high]
        name = f">= {low:g}" if high == float("inf") else f"{low:g}-{high:g}"
        out.append((name, len(inside), sum(inside)))
    return out


def main() -> None:
    """Print the report for the folder given."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    rows = read(args.folder)
    if not rows:
        raise SystemExit(f"no test lines under {args.folder}")
    cpu, wall = sum(r["cpu"] for r in rows), sum(r["wall"] for r in rows)
    print(f"{len(rows)} tests, {cpu:.0f} CPU s, {wall:.0f} s of test time (all workers)")
    print("\n| CPU s | share | test time s | tests | file |\n|---|---|---|---|---|")
    for f, n, c, w in by_file(rows)[: args.top]:
        print(f"| {c:.0f} | {100 * c / cpu:.1f} % | {w:.0f} | {n} | {f} |")
    top = sorted(rows, key=lambda r: -r["cpu"])[: args.top]
    share = 100 * sum(r["cpu"] for r in top) / cpu
    print(f"\nthe {len(top)} costliest tests: {share:.1f} % of the CPU")
    for r in top:
        print(f"  {r['cpu']:6.1f} CPU s {r['wall']:6.1f} s  {r['id']}")
    print("\n| CPU s a test | tests | CPU s | share |\n|---|---|---|---|")
    for name, n, c in bands(rows):
        print(f"| {name} | {n} | {c:.0f} | {100 * c / cpu:.1f} % |")


if __name__ == "__main__":
    main()
