"""How long `distrain run` takes to end after its last line: two source trees side by side.

    python3 benchmarks/recovery/launcher_exit.py --before OLD/src --rounds 6

Each round runs a one-rank job of tests/scripts/node_loss_worker.py (5 steps) once with each
tree on ``PYTHONPATH`` (this checkout's src/ is "after"; `--before` a checkout of an older
commit), alternating, so the machine's load hits both alike.  Measured: from the launcher's last
line of output (read as it comes, through a pipe) to the process's exit.  Prints each run, the
medians and the load before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import REPO, RUN, TESTS, loadavg  # noqa: E402

WORKER = str(TESTS / "scripts" / "node_loss_worker.py")


def one(src: str) -> float:
    """Seconds from the last line `distrain run` printed to its exit, with `src` first on the
    path."""
    with tempfile.TemporaryDirectory(prefix="distrain-exit-") as tmp:
        env = {**os.environ, "PYTHONPATH": src, "BENCH_FIRST_STEP_FILE": f"{tmp}/first"}
        argv = [*RUN, "-n", "1", WORKER, "--dir", f"{tmp}/ckpt", "--steps", "5", "--sleep", "0"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        last = time.monotonic()
        while os.read(proc.stdout.fileno(), 65536):  # EOF once every writer of the pipe is gone
            last = time.monotonic()
        code = proc.wait(timeout=120)
        ended = time.monotonic()
        if code != 0:
            raise RuntimeError(f"{src}: exit code {code}")
        return ended - last


def main() -> int:
    """Alternate the two trees for `--rounds` rounds; print every run and the medians."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="src/ of the older checkout")
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "after": str(REPO / "src")}
    print(f"load before: {loadavg()}", flush=True)
    took: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name, src in trees.items() if r % 2 == 0 else reversed(trees.items()):
            took[name].append(one(src))
            print(f"round {r} {name}: {took[name][-1]:.2f} s", flush=True)
    for name, values in took.items():
        runs = ", ".join(f"{v:.2f}" for v in sorted(values))
        print(f"{name}: median {statistics.median(values):.2f} s ({runs})")
    print(f"load after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
