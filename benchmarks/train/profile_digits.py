"""Where does the time go when the digits CNN runs on 2 processes instead of 1 (1 thread each)?

    PYTHONPATH=src python3 benchmarks/train/profile_digits.py --rounds 3 --steps 150 \
        --out benchmarks/reports/digits/profile.json

Three set-ups, interleaved round by round so that load from elsewhere hits them alike:
- ``solo``: one process alone (the 1-process baseline);
- ``pair``: two processes at once, each training alone with no communication: what the
  machine's cores give two processes (contention, other load) before any all-reduce;
- ``ddp``: two DDP processes under ``distrain run``: adds the gradient all-reduce and the wait
  for the slower process.
Per training step each worker times data loading, forward+backward (with DDP this includes the
all-reduce, which overlaps the backward pass), and the optimizer step; the ddp workers also time
a bare all-reduce of a gradient-sized buffer.  Ratios: pair/solo is the best 2 processes could
do on this machine at this moment; ddp/pair is what communication costs on top.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def worker(steps: int, batch: int) -> None:
    """One training process: time `steps` steps after a warm-up and print a JSON line (rank 0)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.utils.data import TensorDataset

    import distrain

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    ctx = distrain.init(verbose=False)
    torch.manual_seed(0)
    net = nn.Sequential(  # the model of examples/train_digits.py
        nn.Conv2d(1, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )
    model = ctx.prepare_model(net)
    loader = ctx.prepare_loader(TensorDataset(x, y), batch_size=batch, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def batches():
        while True:
            yield from loader

    it = batches()
    times = {"data": 0.0, "fwd_bwd": 0.0, "opt": 0.0}
    warmup = 10
    for i in range(warmup + steps):
        if i == warmup:
            ctx.barrier()
            times = dict.fromkeys(times, 0.0)
            start = time.perf_counter()
        t0 = time.perf_counter()
        xb, yb = next(it)
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        times["data"] += t1 - t0
        times["fwd_bwd"] += t2 - t1
        times["opt"] += t3 - t2
    elapsed = time.perf_counter() - start
    allreduce_ms = None
    if ctx.distributed:
        flat = torch.zeros(sum(p.numel() for p in model.parameters()))
        ctx.barrier()
        t0 = time.perf_counter()
        for _ in range(50):
            dist.all_reduce(flat)
        allreduce_ms = (time.perf_counter() - t0) / 50 * 1000
    if ctx.is_main:
        result = {k + "_ms": v / steps * 1000 for k, v in times.items()}
        result.update(
            step_ms=elapsed / steps * 1000,
            allreduce_ms=allreduce_ms,
            world_size=ctx.world_size,
            params=sum(p.numel() for p in model.parameters()),
        )
        print("RESULT " + json.dumps(result), flush=True)
    ctx.shutdown()


def _results(outputs: list[str]) -> list[dict]:
    found = []
    for text in outputs:
        found += [json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")]
    return found


def _launch(cmds: list[list[str]]) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", DISTRAIN_NUM_THREADS="1")
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for c in cmds
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    res = _results(outs)
    if len(res) != len(cmds):
        raise SystemExit("profile_digits: a worker failed:\n" + "\n".join(o[-2000:] for o in outs))
    return res


def main() -> None:
    """Run the interleaved rounds and print/write the breakdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default="benchmarks/reports/digits/profile.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.steps, args.batch_size)
        return
    me = [
        sys.executable,
        str(HERE),
        "--worker",
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
    ]
    ddp = [
        sys.executable,
        "-m",
        "distrain.cli",
        "run",
        "-n",
        "2",
        str(HERE),
        "--worker",
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
    ]
    load_start = os.getloadavg()
    rows: dict[str, list[dict]] = {"solo": [], "pair": [], "ddp": []}
    for r in range(args.rounds):
        rows["solo"] += _launch([me])
        rows["pair"] += _launch([me, me])
        rows["ddp"] += _launch([ddp])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    b = args.batch_size

    def med(mode: str, key: str) -> float:
        vals = [x[key] for x in rows[mode] if x.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    sps = {
        "solo": b / med("solo", "step_ms") * 1000,
        "pair": 2 * b / med("pair", "step_ms") * 1000,
        "ddp": 2 * b / med("ddp", "step_ms") * 1000,
    }
    summary = {
        "command": " ".join(sys.argv),
        "rounds": args.rounds,
        "steps": args.steps,
        "batch_size": b,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "per_step_ms": {
            m: {
                k: round(med(m, k), 3)
                for k in ("step_ms", "data_ms", "fwd_bwd_ms", "opt_ms", "allreduce_ms")
            }
            for m in rows
        },
        "samples_per_s": {m: round(v, 1) for m, v in sps.items()},
        "speedup_pair_vs_solo": round(sps["pair"] / sps["solo"], 3),
        "speedup_ddp_vs_solo": round(sps["ddp"] / sps["solo"], 3),
        "ddp_vs_pair": round(sps["ddp"] / sps["pair"], 3),
        "raw": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(
        f"{'mode':<6} {'step ms':>8} {'data':>7} {'fwd+bwd':>8} {'opt':>6} {'allreduce':>9} "
        f"{'samples/s':>10}"
    )
    for m in rows:
        s = summary["per_step_ms"][m]
        ar = "" if s["allreduce_ms"] != s["allreduce_ms"] else f"{s['allreduce_ms']:.2f}"
        print(
            f"{m:<6} {s['step_ms']:>8.2f} {s['data_ms']:>7.2f} {s['fwd_bwd_ms']:>8.2f} "
            f"{s['opt_ms']:>6.2f} {ar:>9} {sps[m]:>10.0f}"
        )
    print(
        f"2 independent processes vs 1: {summary['speedup_pair_vs_solo']:.2f}x; "
        "2-process DDP vs 1: "
        f"{summary['speedup_ddp_vs_solo']:.2f}x; DDP vs independent pair: "
        f"{summary['ddp_vs_pair']:.2f}"
    )
    print(
        f"load average {summary['load_average_start']} -> {summary['load_average_end']}; "
        f"wrote {args.out}"
    )


if __name__ == "__main__":
    main()
