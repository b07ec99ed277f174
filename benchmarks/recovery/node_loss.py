"""Node loss: SIGKILL a whole node of a 1:2 elastic job → the survivor's first resumed step.

Two "nodes" are Linux network namespaces joined by a veth pair (root needed).  Each runs `distrain
run --nnodes 1:2 --rdzv-backend c10d -n 1` (node 0 hosts the rendezvous) with
tests/scripts/node_loss_worker.py (checkpoint every 5 steps; tests/jobs/test_node_loss.py runs it
too).  Once both nodes trained together for a second, every process in node 1's namespace (agent,
workers, fork server) is SIGKILLed at once; the time is from the kill to the survivor's first
optimizer step of its restart (world size 1, resumed from the checkpoint).  Rounds alternate
distrain's rendezvous defaults (launch/nodes/rendezvous.py) with torch's own (keep_alive_interval=5,
keep_alive_max_attempt=3, last_call_timeout=30, given explicitly), so machine load hits both alike.
``--memory-every K`` gives the worker the memory tier too (a snapshot every K steps), each node
its own memory root under /dev/shm; node 1's is removed with it, so the survivor resumes from
its own snapshot or the copy of node 1's it keeps (the line it printed is shown).

    sudo python3 benchmarks/recovery/node_loss.py --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import RUN, TESTS, delete_pair, env, kill_namespace, loadavg, veth_pair  # noqa: E402

WORKER = str(TESTS / "scripts" / "node_loss_worker.py")
VARIANTS = {
    "distrain": [],
    "torch-defaults": [
        "--rdzv-conf",
        "keep_alive_interval=5,keep_alive_max_attempt=3,last_call_timeout=30",
    ],
}


def _rows(marker: Path) -> list[tuple[str, int, int, float]]:
    if not marker.exists():
        return []
    rows = []
    for line in marker.read_text().splitlines():
        host, restart, world, at, _step = line.split()
        rows.append((host, int(restart), int(world), float(at)))
    return rows


def one(variant: str, round_no: int, timeout: float, memory_every: int = 0) -> float:
    """Seconds from the SIGKILL of node 1 to node 0's first step after its restart."""
    tag = f"nl{os.getpid() % 10000}r{round_no}"
    procs: list[subprocess.Popen[bytes]] = []
    names: list[str] = []
    roots: list[Path] = []
    tmp = tempfile.mkdtemp(prefix="distrain-nodeloss-")  # removed after the kills, not before
    try:
        names, addrs = veth_pair(tag, f"10.201.{10 + (os.getpid() + round_no) % 200}")
        marker = Path(tmp) / "first_steps"
        flags = ["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"{addrs[0]}:29400", "--rdzv-id", tag,
                 "--max-restarts", "3", "-n", "1", *VARIANTS[variant]]  # fmt: skip
        worker_args = ["--dir", f"{tmp}/ckpt", "--memory-every", str(memory_every)]
        roots = [Path(tempfile.mkdtemp(prefix=f"{tag}-n{i}-", dir="/dev/shm")) for i in (0, 1)]
        for i, name in enumerate(names):
            job_env = env(
                BENCH_NODE=f"n{i}",
                BENCH_FIRST_STEP_FILE=str(marker),
                DISTRAIN_MEMORY_DIR=str(roots[i]),  # each node its own tmpfs
            )
            log = open(Path(tmp) / f"node{i}.log", "wb")  # noqa: SIM115 - the child holds it
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", name, *RUN, *flags, WORKER, *worker_args],
                    env=job_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            log.close()
        deadline = time.time() + timeout
        while not {h for h, _, w, _ in _rows(marker) if w == 2} >= {"n0", "n1"}:
            if time.time() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(
                    f"{variant}: both nodes never trained together\n"
                    + (Path(tmp) / "node0.log").read_text()[-2000:]
                )
            time.sleep(0.05)
        time.sleep(1.0)
        killed_at = time.time()
        kill_namespace(names[1])
        shutil.rmtree(roots[1], ignore_errors=True)  # the machine is gone, its memory too
        while True:
            after = [at for h, _, w, at in _rows(marker) if h == "n0" and w == 1 and at > killed_at]
            if after:
                said = (Path(tmp) / "node0.log").read_text().splitlines()
                print("  " + next((ln for ln in said[::-1] if "resumed from" in ln), "?"))
                return min(after) - killed_at
            if time.time() > deadline or procs[0].poll() is not None:
                raise RuntimeError(
                    f"{variant}: the survivor did not resume\n"
                    + (Path(tmp) / "node0.log").read_text()[-3000:]
                )
            time.sleep(0.05)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        for name in names:
            kill_namespace(name)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        delete_pair(tag)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    """Interleaved rounds of each variant; prints median/min/max per variant and the ratio."""
    if os.geteuid() != 0:
        sys.exit("node_loss.py needs root (network namespaces)")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per round")
    parser.add_argument("--memory-every", type=int, default=0, help="memory-tier snapshots every K")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    results: dict[str, list[float]] = {v: [] for v in variants}
    print(f"load before: {loadavg()}", flush=True)
    for r in range(args.rounds):
        for v in variants:
            seconds = one(v, r * len(variants) + variants.index(v), args.timeout, args.memory_every)
            results[v].append(seconds)
            print(f"round {r + 1} {v:15s} {seconds:6.2f} s", flush=True)
    print(f"load after: {loadavg()}")
    print("SIGKILL of node 1 → survivor's first resumed step (seconds)")
    base = statistics.median(results[variants[-1]])
    for v, xs in results.items():
        med = statistics.median(xs)
        print(
            f"  {v:15s} median {med:6.2f}  min {min(xs):6.2f}  max {max(xs):6.2f}  ratio "
            f"{med / base:4.2f}  all " + " ".join(f"{x:.2f}" for x in xs)
        )


if __name__ == "__main__":
    main()
