"""How long a usage error of `distrain run` takes, beside ``import torch`` (issue 45: ≤ 0.25×).

Each round runs, in turn: the yardstick ``python -c "import torch"``, then every bad command line
below as ``python -m distrain.cli run …`` (a typo'd option, an abbreviation two options share, a
bad value, a missing script), optionally also on an older checkout's src/ (``--before SRC``).
Whole processes are timed from outside (wall clock around the child, its CPU seconds from
``RUSAGE_CHILDREN``); each command's ratio to the same round's ``import torch`` is taken round
by round, and the medians are printed, with the load average before and after.

    python3 benchmarks/launch/usage_errors.py --rounds 7 [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import PY, SRC, loadavg  # noqa: E402

SCRIPT = str(Path(__file__).resolve().parent / "plain_ddp.py")  # exists: the typo is the error
BAD = {
    "typo": ["--max-restrats", "3", SCRIPT],
    "ambiguous": ["--max", "3", SCRIPT],
    "bad value": ["--max-restarts", "x", SCRIPT],
    "no script": ["-n", "2", "no/such/train.py"],
}


def timed(cmd: list[str], src: Path) -> tuple[float, float, int, str]:
    """(wall s, CPU s, exit code, last stderr line) of one whole run of `cmd` on `src`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=_env(src), stdin=subprocess.DEVNULL
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (res.stderr.strip().splitlines() or [""])[-1]
    return wall, cpu, res.returncode, last


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def cpu_model() -> str:
    """lscpu's model name."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "?")


def main() -> None:
    """Run the rounds and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before", type=Path, default=None, help="an older checkout's src/")
    args = ap.parse_args()
    sources = {"now": SRC, **({"before": args.before} if args.before else {})}
    print(f"# cpu: {cpu_model()}; load before: {loadavg()}", flush=True)
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    said: dict[str, str] = {}
    for _ in range(args.rounds):
        torch_wall, torch_cpu, _, _ = timed([PY, "-c", "import torch"], SRC)
        walls.setdefault("import torch", []).append(torch_wall)
        cpus.setdefault("import torch", []).append(torch_cpu)
        for tag, src in sources.items():
            for name, argv in BAD.items():
                key = f"{tag}: {name}"
                wall, cpu, code, last = timed([PY, "-m", "distrain.cli", "run", *argv], src)
                walls.setdefault(key, []).append(wall)
                cpus.setdefault(key, []).append(cpu)
                ratios.setdefault(key, []).append(wall / torch_wall)
                said[key] = f"exit {code}: {last[:90]}"
    print(f"# rounds {args.rounds}; load after: {loadavg()}")
    print(f"{'command':<22} {'wall med':>9} {'min':>6} {'max':>6} {'CPU med':>8} {'ratio':>6}")
    for key, values in walls.items():
        ratio = f"{statistics.median(ratios[key]):6.3f}" if key in ratios else "  1.00"
        print(
            f"{key:<22} {statistics.median(values):9.2f} {min(values):6.2f} {max(values):6.2f} "
            f"{statistics.median(cpus[key]):8.2f} {ratio}"
        )
    for key, line in said.items():
        print(f"  {key}: {line}")


if __name__ == "__main__":
    main()
