"""The cost of crossing a network stack: 2 nodes × 1 process over veth vs 1 node × 2 processes.

Same model (a 1.8 M-parameter MLP, 7 MB of gradients all-reduced per step), same per-process
batch, one thread per process, gloo.  The "2 nodes" are two Linux network namespaces joined by
a veth pair (root needed), started with `distrain run --nnodes 2`; the baseline is
`distrain run -n 2` on loopback.  Rounds are interleaved so machine load hits both alike.

    sudo python3 benchmarks/train/multinode.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import RUN, delete_pair, env, veth_pair  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "multinode_worker.py")
ENV = env()


def loopback(out: Path, steps: int) -> dict:
    """1 node × 2 processes."""
    subprocess.run(
        RUN + ["-n", "2", WORKER, "--steps", str(steps), "--out", str(out)],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return json.loads(out.read_text())


def two_nodes(names: list[str], addrs: list[str], out: Path, steps: int) -> dict:
    """2 namespaces × 1 process."""
    procs = []
    for rank, name in enumerate(names):
        argv = [
            "ip",
            "netns",
            "exec",
            name,
            *RUN,
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--master-addr",
            addrs[0],
            "--master-port",
            "29500",
            "-n",
            "1",
            WORKER,
            "--steps",
            str(steps),
            "--out",
            str(out),
        ]
        procs.append(
            subprocess.Popen(
                argv,
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    for proc in procs:
        if proc.wait(timeout=600) != 0:
            raise SystemExit(f"two-node run failed ({proc.args})")
    return json.loads(out.read_text())


def main() -> int:
    """Run the interleaved rounds and print the table and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("benchmarks/train/multinode.py needs root (network namespaces)")
    tag = f"bm{os.getpid() % 100000}"
    try:
        names, addrs = veth_pair(tag, "10.200.250")
        loop, net = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                loop.append(loopback(Path(tmp) / f"l{r}.json", args.steps))
                net.append(two_nodes(names, addrs, Path(tmp) / f"n{r}.json", args.steps))
                print(
                    f"round {r + 1}: loopback {loop[-1]['samples_per_s']:.0f} samples/s "
                    f"({loop[-1]['step_ms']:.1f} ms/step) · "
                    f"veth {net[-1]['samples_per_s']:.0f} samples/s "
                    f"({net[-1]['step_ms']:.1f} ms/step)",
                    flush=True,
                )
        ml = statistics.median(x["samples_per_s"] for x in loop)
        mn = statistics.median(x["samples_per_s"] for x in net)
        print(
            f"median: 1 node × 2 procs (loopback) {ml:.0f} samples/s · 2 nodes × 1 proc (veth) "
            f"{mn:.0f} samples/s · "
            f"ratio veth/loopback {mn / ml:.2f} ({loop[0]['params'] / 1e6:.1f} M params)"
        )
    finally:
        delete_pair(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
