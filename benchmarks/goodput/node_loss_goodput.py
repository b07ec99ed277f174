"""Goodput with a node loss (issue 44): an elastic job on two "nodes" loses one, memory and all.

    sudo python3 benchmarks/goodput/node_loss_goodput.py --minutes 2 --at 40 --wait 0.2

Two network namespaces joined by a veth pair (benchmarks/common.py), each running one launcher of
an elastic job (``--nnodes 1:2``, c10d rendezvous on node 0, one process per node) of
goodput_worker.py, each node with its own memory root.  In the "lost" run every process in node
1's namespace is SIGKILLed ``--at`` seconds after the first step and its memory root removed:
the machine is gone.  The survivor goes on alone (world size 1, so each later step is half the
global batch: the worker's batch is per process, as in a tutorial).  The same job without the
loss runs next to it, the pair's order alternating between variants.  Variants:

- ``memory``: ``distrain run``, ``memory_every_steps="auto"``, disk every 100 steps;
- ``disk``: ``distrain run``, disk every 100 steps;
- ``torchrun``: ``torchrun --local-addr <node's address>`` (its rendezvous defaults), DCP every 100.

Measured: useful samples per minute (the global samples of the steps the job's state holds at the
deadline: after the loss a step is half the global batch, so steps would overstate the
survivor's work), useful steps per minute as goodput.py counts them (the step reached),
lost steps (the last step logged before the survivor's restart minus the step it resumed from)
and loss → the survivor's first step after its restart.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import (  # noqa: E402
    BENCH,
    RUN,
    TORCHRUN,
    delete_pair,
    env,
    kill_namespace,
    loadavg,
    veth_pair,
)
from goodput import read_log  # noqa: E402

WORKER = str(BENCH / "goodput" / "goodput_worker.py")
VARIANTS = {"memory": ["--memory-every", "auto"], "disk": [], "torchrun": []}


def launcher(variant: str, tag: str, addrs: list[str], node: int) -> list[str]:
    """Node `node`'s launcher command of the elastic job."""
    rdzv = [
        "--nnodes",
        "1:2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{addrs[0]}:29400",
        "--rdzv-id",
        tag,
        "--max-restarts",
        "10",
    ]
    if variant == "torchrun":  # the namespace's hostname resolves to loopback: torch's
        # matching of the endpoint with this machine fails, so node 0 is told it hosts the store
        host = f"is_host={'true' if node == 0 else 'false'}"
        return [*TORCHRUN, *rdzv, "--rdzv-conf", host, "--nproc-per-node", "1",
                "--local-addr", addrs[node]]  # fmt: skip
    return [*RUN, *rdzv, "-n", "1"]


def committed_samples(path: Path, resumes: list[tuple[float, int]], deadline: float) -> int:
    """The samples of the steps the job's state holds at the deadline: a resume from step R
    drops the steps after R that the killed attempt had made."""
    events: list[tuple[float, int, int]] = [(t, r, -1) for t, r in resumes]  # -1: a resume
    if path.exists():
        for line in path.read_text().splitlines():
            t, step, n = line.split()
            events.append((float(t), int(step), int(n)))
    held: dict[int, int] = {}
    for t, step, n in sorted(events):
        if t > deadline:
            break
        if n < 0:
            held = {s: k for s, k in held.items() if s <= step}
        else:
            held[step] = n
    return sum(held.values())


def one_run(variant: str, lose: bool, args: argparse.Namespace, round_no: int) -> dict:
    """One run of `variant` for ``args.minutes`` of training; node 1 lost at ``args.at`` s."""
    tag = f"ng{os.getpid() % 1000}{'l' if lose else 'f'}{round_no}{variant[0]}"
    work = Path(tempfile.mkdtemp(prefix=f"dbench-{tag}-"))
    roots = [Path(tempfile.mkdtemp(prefix=f"{tag}-n{i}-", dir="/dev/shm")) for i in (0, 1)]
    names: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    log = work / "steps.log"
    try:
        names, addrs = veth_pair(tag, f"10.202.{10 + (os.getpid() + round_no) % 200}")
        script = [
            WORKER,
            "--steplog",
            str(log),
            "--ckpt",
            str(work / "ckpt"),
            "--hidden",
            str(args.hidden),
            "--wait",
            str(args.wait),
            "--count-samples",
            *VARIANTS[variant],
        ]
        for i, name in enumerate(names):
            job_env = env(
                DISTRAIN_MEMORY_DIR=str(roots[i]),
                OMP_NUM_THREADS="1",
                GLOO_SOCKET_IFNAME=f"{tag}{'ab'[i]}",
            )
            out = open(work / f"node{i}.out", "wb")  # noqa: SIM115 - the child holds it
            cmd = ["ip", "netns", "exec", name, *launcher(variant, tag, addrs, i), *script]
            procs.append(
                subprocess.Popen(
                    cmd, env=job_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
            out.close()
        start = None
        while start is None:
            if any(p.poll() is not None for p in procs):
                raise SystemExit(f"{variant}: a node exited: see {work}")
            steps, _ = read_log(log)
            start = steps[0][0] if steps else None
            time.sleep(0.1)
        deadline, lost_at = start + 60 * args.minutes, None
        while time.time() < deadline:
            if lose and lost_at is None and time.time() >= start + args.at:
                lost_at = time.time()
                kill_namespace(names[1])
                shutil.rmtree(roots[1], ignore_errors=True)
            time.sleep(0.05)
    finally:
        for name in names:
            kill_namespace(name)
        for proc in procs:
            proc.wait(timeout=30)
        delete_pair(tag)
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    steps, resumes = read_log(log)
    said = [
        ln.strip()
        for i in (0, 1)
        for ln in open(work / f"node{i}.out", errors="replace")
        if "resumed from" in ln or "memory snapshots every" in ln
    ]
    useful = max((s for t, s, _, _ in steps if t <= deadline), default=0)
    samples = committed_samples(Path(f"{log}.samples"), resumes, deadline)
    shutil.rmtree(work, ignore_errors=True)
    out = {"per_min": useful / args.minutes, "samples_per_min": samples / args.minutes,
           "said": said, "lost": None, "gap": None}  # fmt: skip
    if lost_at is not None:
        after = [r for r in resumes if r[0] > lost_at]
        restart = after[0][0] if after else float("inf")  # a step in flight may land after the loss
        before = [s for t, s, _, _ in steps if t <= restart]
        first = [t for t, _, _, _ in steps if t > restart]
        if before and after and first:
            out["lost"], out["gap"] = before[-1] - after[0][1], first[0] - lost_at
    return out


def main() -> None:
    """Each variant's run with and without the node loss, side by side; one table."""
    if os.geteuid() != 0:
        sys.exit("node_loss_goodput.py needs root (network namespaces)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--at", type=float, default=40.0, help="seconds after the first step")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    p.add_argument("--hidden", type=int, default=512, help="the MLP's width")
    p.add_argument("--wait", type=float, default=0.0, help="idle seconds added to each step")
    args = p.parse_args()
    names = args.variants.split(",")
    print(f"load before: {loadavg()}", flush=True)
    rows = []
    for i, name in enumerate(names):
        pair = {}
        for lose in (False, True) if i % 2 == 0 else (True, False):
            pair[lose] = one_run(name, lose, args, i)
            said = pair[lose]["said"]  # the resume line first, then the choice of K
            for line in sorted(said, key=lambda ln: "resumed from" not in ln)[:2]:
                print(f"{name}-{'lost' if lose else 'free'}: {line}", flush=True)
        rows.append((name, pair[False], pair[True]))
    print(f"load after: {loadavg()}")
    print(f"{args.minutes:g} min per run, node 1 lost {args.at:g} s after the first step")
    print("variant   | free samples/min | lost-node samples/min | ratio | steps/min free, "
          "lost-node | lost steps | loss -> step")  # fmt: skip
    for name, free, lost in rows:
        gap = f"{lost['gap']:.2f} s" if lost["gap"] is not None else "-"
        ratio = lost["samples_per_min"] / max(free["samples_per_min"], 1e-9)
        print(
            f"{name:9} | {free['samples_per_min']:16.0f} | {lost['samples_per_min']:21.0f} | "
            f"{ratio:.3f} | {free['per_min']:.0f}, {lost['per_min']:.0f} | "
            f"{lost['lost']!s:>10} | {gap}"
        )
    by = {name: lost["samples_per_min"] for name, _, lost in rows}
    for name in ("memory", "disk"):
        if name in by and "torchrun" in by:
            print(f"{name} / torchrun (node lost, samples): {by[name] / by['torchrun']:.2f}x")


if __name__ == "__main__":
    main()
