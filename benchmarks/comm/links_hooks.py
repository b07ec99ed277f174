"""DDP comm hooks over a slow link: 2 namespace "nodes" × 1 process joined at 1 Gbit/s (tc tbf).

    sudo python3 benchmarks/comm/links_hooks.py --rounds 2 --rate 1gbit --model mlp

Configurations: no hook, bf16, fp16, PowerSGD rank 2 and rank 4 (compressing from step 10;
distrain puts the whole model in one bucket for PowerSGD on gloo, the others keep DDP's 25 MB
buckets), each
a real `distrain run --nnodes 2` job of links_hooks_worker.py (one thread per
process).  Rounds interleave the configurations (rotated each round).  Prints every run, then
median samples/s, the ratio to no hook, and the test accuracy (median) with its difference to
no hook in points.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import PY, SRC, TESTS, loadavg  # noqa: E402

sys.path.insert(0, str(TESTS))
from helpers.netns_hosts import Hosts, hosts  # noqa: E402  (the tests' namespace fixture, reused)

WORKER = str(Path(__file__).resolve().parent / "links_hooks_worker.py")
CONFIGS = ["none", "bf16", "fp16", "powersgd:rank=2", "powersgd:rank=4"]


def one(net: Hosts, hook: str, args: argparse.Namespace, tmp: Path, port: int) -> dict:
    """One 2-node run; its rank 0 result."""
    out = tmp / "r.json"
    out.unlink(missing_ok=True)
    env = {"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    procs, logs = [], []
    for i in range(2):
        logs.append(tmp / f"node{i}.log")
        argv = [
            PY,
            "-m",
            "distrain.cli",
            "run",
            "--nnodes",
            "2",
            "--node-rank",
            str(i),
            "--master-addr",
            net.addrs[0],
            "--master-port",
            str(port),
            "-n",
            "1",
            WORKER,
            "--model",
            args.model,
            "--hook",
            hook,
            "--epochs",
            str(args.epochs),
            "--batch-size",
            str(args.batch_size),
            "--out",
            str(out),
        ]
        procs.append(net.start(i, argv, logs[i], env=env))
    for proc, log in zip(procs, logs, strict=True):
        if proc.wait(timeout=900) != 0:
            net.kill_all()
            raise SystemExit(f"run with hook {hook} failed:\n{log.read_text()[-3000:]}")
    return json.loads(out.read_text())


def main() -> int:
    """Interleaved rounds, then the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", default="1gbit", help="link rate in tc units (default 1gbit)")
    ap.add_argument("--model", choices=["mlp", "resnet18"], default="mlp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16, help="per process")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    args = ap.parse_args()
    configs = args.configs.split(",")
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # unwind: the namespaces are deleted on the way out
    print(f"load before: {loadavg()}", flush=True)
    res: dict[str, list[dict]] = {c: [] for c in configs}
    port = 29600
    with hosts(2, rate=args.rate) as net, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for hook in configs[r % len(configs) :] + configs[: r % len(configs)]:
                port += 1
                v = one(net, hook, args, Path(tmp), port)
                res[hook].append(v)
                print(
                    f"round {r + 1} {hook:16s} {v['samples_per_s']:7.1f} samples/s "
                    f"{v['step_ms']:7.1f} ms/step "
                    f"acc {v['test_acc']:.4f} ({v['params'] / 1e6:.1f} M params)",
                    flush=True,
                )
    print(f"load after: {loadavg()}")
    base = statistics.median(v["samples_per_s"] for v in res["none"]) if "none" in res else None
    base_acc = statistics.median(v["test_acc"] for v in res["none"]) if "none" in res else None
    print(
        f"\n{args.model} over {args.rate}, 2 nodes x 1 process: median samples/s, ratio to no "
        "hook, median test accuracy"
    )
    for hook in configs:
        sps = statistics.median(v["samples_per_s"] for v in res[hook])
        acc = statistics.median(v["test_acc"] for v in res[hook])
        ratio = f"{sps / base:5.2f}x" if base else "-"
        dacc = f"{100 * (acc - base_acc):+.1f} pt" if base_acc is not None else "-"
        print(f"  {hook:16s} {sps:7.1f} samples/s  {ratio}  acc {acc:.4f} ({dacc})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
