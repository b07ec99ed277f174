"""Does `distrain bench scaling` tell the truth?  Its figures beside a plain torchrun loop.

    python3 benchmarks/train/scaling_vs_torchrun.py --rounds 3 --epochs 3

The probe of the built-in `cnn` workload (distrain.tools.bench.study.probe) picks the image size
once on this machine; then each round runs, back to back, `distrain bench scaling --nproc 1,2` of
the built-in workload at that size and the same model trained by benchmarks/train/plain_ddp_cnn.py
under `torchrun`: 1 process without DDP (the base distrain's 1-process run has: `prepare_model`
wraps nothing in a world of one), 1 with DDP, 2 with DDP; one thread each, the same
per-process batch and epochs.  Both record when every optimizer step ends and are timed by the
same code (distrain.tools.bench.study.steps: median over steady-state steps, warm-up,
evaluation and epoch boundaries excluded).  Printed: samples/s per round, the medians, the
ratios distrain / torchrun, and both speedups over the same base.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import PY, REPO, TORCHRUN, env, loadavg  # noqa: E402

from distrain.tools.bench.study import probe
from distrain.tools.bench.study.steps import read_steps, steady_stats  # noqa: E402

PLAIN = Path(__file__).resolve().with_name("plain_ddp_cnn.py")


def cpu_line(run_dir: Path) -> str:
    """Where the 2-process ranks' CPU went: the training loop's thread against every other
    thread (the workload's ``thread_cpu_s``), summed over ranks, the three largest named."""
    threads: dict[str, float] = {}
    for path in run_dir.rglob("steps-rank-*.json"):
        data = json.loads(path.read_text())
        if data.get("world_size") == 2:
            for name, cpu in (data.get("thread_cpu_s") or {}).items():
                threads[name] = threads.get(name, 0.0) + cpu
    main = threads.pop("MainThread", 0.0)
    top = sorted(threads.items(), key=lambda kv: -kv[1])[:3]
    named = ", ".join(f"{name} {cpu:.2f}" for name, cpu in top)
    return f"main thread {main:.1f} s, other threads {sum(threads.values()):.2f} s ({named})"


def distrain_round(work: Path, size: int, args: argparse.Namespace) -> dict[int, float]:
    """samples/s of the built-in bench at 1 and 2 processes (its own results.json)."""
    out = work / "bench"
    cmd = [PY, "-m", "distrain.cli", "bench", "scaling", "--nproc", "1,2", "--no-all-cores",
           "--epochs", str(args.epochs),
           "--batch-size", str(args.batch_size), "--out", str(out), "--", "--image-size",
           str(size)]  # fmt: skip
    subprocess.run(
        cmd,
        check=True,
        env=env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=1800,
    )
    configs = json.loads((out / "results.json").read_text())["configs"]
    assert all(c["timing"] == "steps" for c in configs), "the bench did not time steps"
    print(f"#   distrain cpu of the 2 ranks: {cpu_line(out)}", flush=True)
    return {c["nproc"]: c["samples_per_s"] for c in configs}


def torchrun_round(work: Path, size: int, args: argparse.Namespace) -> dict[int, float]:
    """samples/s of the plain torchrun script at 1 and 2 processes, timed by the bench's code."""
    got = {}
    # key 0: one process without DDP, the base distrain's 1-process run has (prepare_model
    # wraps nothing in a world of one)
    for key, n, extra in ((0, 1, ["--no-ddp"]), (1, 1, []), (2, 2, [])):
        out = work / f"torchrun-{key}"
        cmd = [*TORCHRUN, "--standalone", "--nproc-per-node", str(n), str(PLAIN), "--image-size",
               str(size),
               "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--out",
               str(out), *extra]  # fmt: skip
        done = subprocess.run(cmd, env=env(OMP_NUM_THREADS="1"), cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=1800)  # fmt: skip
        written = len(list((out / "bench").glob("steps-rank-*.json"))) == n
        if done.returncode and not (written and "without an active exception" in done.stderr):
            raise SystemExit(f"torchrun failed ({done.returncode}): {done.stderr[-2000:]}")
        if done.returncode:  # every rank wrote its steps, then gloo's teardown aborted
            print(f"#   torchrun exit {done.returncode} after every rank's steps were written: "
                  "torch's gloo teardown abort ('terminate called without an active "
                  "exception'), the steps stand", flush=True)  # fmt: skip
        got[key] = steady_stats(read_steps(out))["step_samples_per_s"]
        if n == 2:
            print(f"#   torchrun cpu of the 2 ranks: {cpu_line(out)}", flush=True)
    return got


def main() -> None:
    """Probe, run the rounds, print every figure and the ratios."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--step-target", type=float, default=probe.TARGET_STEP_S)
    args = p.parse_args()
    print(f"# load before: {loadavg()}", flush=True)
    model = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines()
        if ln.startswith("Model name")), "?")  # fmt: skip
    print(f"# lscpu model name: {model}", flush=True)
    sizing = probe.size_cnn(args.step_target, args.batch_size, 1)
    size = sizing["image_size"]
    print(f"# workload {probe.describe(sizing)}", flush=True)
    rows: dict[str, dict[int, list[float]]] = {
        "distrain": {1: [], 2: []},
        "torchrun": {0: [], 1: [], 2: []},
    }
    for k in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="scaling-vs-torchrun-") as tmp:
            for name, fn in (("distrain", distrain_round),
                             ("torchrun", torchrun_round)) if k % 2 else (
                    ("torchrun", torchrun_round), ("distrain", distrain_round)):  # fmt: skip
                got = fn(Path(tmp), size, args)
                for n in got:
                    rows[name][n].append(got[n])
                plain = f", 1 process without DDP {got[0]:7.1f}" if 0 in got else ""
                print(
                    f"round {k} {name:8s}: 1 process {got[1]:7.1f} samples/s{plain}, 2 "
                    f"processes {got[2]:7.1f} "
                    f"(speedup {got[2] / got[1]:.2f}×)  load {loadavg().split()[0]}",
                    flush=True,
                )
    med = {name: {n: statistics.median(v) for n, v in by_n.items()} for name, by_n in rows.items()}
    print("\nmedians over rounds (samples/s)      1 process   2 processes   speedup")
    for name in ("distrain", "torchrun"):
        m = med[name]
        print(f"{name:36s} {m[1]:9.1f}   {m[2]:11.1f}   {m[2] / m[1]:6.2f}×")
    d, t = med["distrain"], med["torchrun"]
    per_round = [a / b for a, b in zip(rows["distrain"][2], rows["torchrun"][2], strict=True)]
    print(
        f"distrain / torchrun: 1 process {d[1] / t[1]:.3f}, 2 processes {d[2] / t[2]:.3f} "
        f"(per round: {', '.join(f'{r:.3f}' for r in per_round)}), speedup "
        f"{(d[2] / d[1]) / (t[2] / t[1]):.3f}"
    )
    same = (d[2] / d[1]) / (t[2] / t[0])
    print(
        f"speedups over one process without DDP (the same base for both): distrain "
        f"{d[2] / d[1]:.2f}×, torchrun {t[2] / t[0]:.2f}× (ratio {same:.3f}); torchrun's 1 "
        f"process with DDP / without: {t[1] / t[0]:.3f}"
    )
    print(f"# load after: {loadavg()}")


if __name__ == "__main__":
    main()
