"""Recovery time: SIGKILL of one worker -> first training step of the restarted group, in seconds.

    python3 benchmarks/recovery/recovery.py --rounds 3              # distrain script + checkpointer
    python3 benchmarks/recovery/recovery.py --job plain --rounds 3  # plain torchrun: launchers

``--job distrain`` (the default): a 2-rank job (tests/scripts/ckpt_worker.py: ``distrain.init()``
and the Checkpointer) kills rank 1 with SIGKILL at step 6 on the first attempt; the time from the
kill to rank 0's first completed step after the restart (the job's own timeline) is measured for:

- ``distrain run`` + checkpoint resume (restore, then continue mid-epoch);
- plain ``torchrun`` + checkpoint resume (the same script: distrain.init's per-attempt store);
- plain ``torchrun`` restarting the script from scratch (no checkpoint): torchrun's own restart.

``--job plain``: benchmarks/launch/plain_ddp.py (no distrain; ``torch.save`` checkpoint every
step) under ``--max-restarts 1`` of ``distrain run`` (fast start), ``distrain run --start-method
spawn`` and torchrun.  After both ranks' first step + 1 s the driver SIGKILLs rank 1; the time
runs to the last rank's first step of the restart (BENCH_FIRST_STEP_FILE lines), and the
checkpoint load time the script measured is printed beside it.  Every launcher gets
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (restart_tally.py counts how often torchrun restarts fail
without it).

Variants are interleaved round by round so machine load hits them alike.  ``--control N`` first runs
restart_tally.py's tally: N kill-restarts of a plain torch.distributed script per store setting.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import BENCH, RUN, TESTS, TORCHRUN, env, kill_tree  # noqa: E402
from restart_tally import tally  # noqa: E402

CKPT_WORKER = str(TESTS / "scripts" / "ckpt_worker.py")
PLAIN_WORKER = str(BENCH / "launch" / "plain_ddp.py")
PLAIN_LAUNCHERS = {
    "distrain-fast": RUN + ["-n", "2", "--max-restarts", "1"],
    "distrain-spawn": RUN + ["-n", "2", "--max-restarts", "1", "--start-method", "spawn"],
    "torchrun": TORCHRUN + ["--nproc-per-node", "2", "--max-restarts", "1"],
}


def variants(d: str, nproc: int = 2) -> dict[str, list[str]]:
    """--job distrain: name -> command; {d} holds the checkpoint dir and timeline of one run.
    The last rank is the one killed (rank 0 on a one-GPU machine, where `nproc` is 1)."""
    common = ["--out", f"{d}/final.pt", "--kill-at", "6", "--timeline", f"{d}/timeline", "--epochs",
              "2", "--fault-rank", str(nproc - 1)]  # fmt: skip
    n = str(nproc)
    torchrun = TORCHRUN + [
        "--nproc-per-node",
        n,
        "--max-restarts",
        "1",
        "--monitor-interval",
        "0.1",
        CKPT_WORKER,
        "--",
    ]
    return {
        "distrain run + resume": RUN
        + ["-n", n, "--max-restarts", "1", CKPT_WORKER, "--dir", f"{d}/ckpt", *common],
        "torchrun + resume": torchrun + ["--dir", f"{d}/ckpt", *common],
        "torchrun, from scratch": torchrun + common,
    }


def one(cmd: list[str], d: str, timeout: float) -> float:
    """--job distrain: run one job; seconds from the kill to the first step after the restart."""
    res = subprocess.run(
        cmd, env=env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=timeout
    )
    if res.returncode != 0:
        raise SystemExit(
            f"job failed (exit {res.returncode}): "
            f"{' '.join(cmd)}\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
        )
    events = dict(line.split() for line in Path(d, "timeline").read_text().splitlines())
    return float(events["resumed_step"]) - float(events["fault"])


def _lines(marker: Path) -> list[list[str]]:
    return [line.split() for line in marker.read_text().splitlines()] if marker.exists() else []


def _wait(
    marker: Path, attempt: str, proc: subprocess.Popen[str], deadline: float
) -> list[list[str]]:
    while time.time() < deadline:
        rows = [r for r in _lines(marker) if r[1] == attempt]
        if len(rows) == 2:
            return rows
        if proc.poll() is not None:
            raise RuntimeError(
                f"job ended (exit {proc.returncode}) before attempt {attempt} trained"
            )
        time.sleep(0.02)
    raise TimeoutError(f"attempt {attempt} did not train in time")


def one_plain(launcher: str, work: Path, timeout: float) -> tuple[float, float]:
    """--job plain: (kill → last rank's first resumed step, checkpoint load seconds)."""
    tag = f"{launcher}-{time.monotonic_ns()}"
    marker, ckpt = work / f"{tag}.txt", work / f"{tag}.pt"
    cmd = PLAIN_LAUNCHERS[launcher] + [
        PLAIN_WORKER,
        "--steps",
        "400",
        "--sleep",
        "0.05",
        "--ckpt",
        str(ckpt),
    ]
    job_env = env(
        BENCH_FIRST_STEP_FILE=str(marker),
        OMP_NUM_THREADS="1",
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    proc = subprocess.Popen(
        cmd,
        env=job_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + timeout
        first = _wait(marker, "0", proc, deadline)
        time.sleep(1.0)
        victim = int(next(r for r in first if r[0] == "1")[4])
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        resumed = _wait(marker, "1", proc, deadline)
        return max(float(r[2]) for r in resumed) - t_kill, max(float(r[3]) for r in resumed)
    finally:
        kill_tree(proc)
        proc.wait()


def distrain_job(rounds: int, timeout: float, nproc: int = 2) -> None:
    """Interleave the three variants for `rounds` rounds; print medians vs torchrun from scratch."""
    results: dict[str, list[float]] = {}
    for r in range(rounds):
        for name in variants("-"):
            with tempfile.TemporaryDirectory() as d:
                t = one(variants(d, nproc)[name], d, timeout)
            results.setdefault(name, []).append(t)
            print(f"round {r + 1}: {name:<24} {t:6.2f} s", flush=True)
    base = statistics.median(results["torchrun, from scratch"])
    import torch  # the device the job ran on: one GPU per rank where there are GPUs

    where = f"nccl, {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "gloo, CPU"
    print(
        f"\nSIGKILL -> first training step after restart, median of {rounds} ({nproc} "
        f"ranks, {where}):"
    )
    for name, ts in results.items():
        med = statistics.median(ts)
        print(
            f"  {name:<24} {med:6.2f} s   (min {min(ts):.2f}, max {max(ts):.2f}; {med / base:.2f}x "
            "torchrun's own restart)"
        )


def plain_job(rounds: int, timeout: float) -> None:
    """Interleaved rounds of the three launchers; print medians and the ratio against torchrun."""
    names = list(PLAIN_LAUNCHERS)
    res: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for launcher in names[r % len(names) :] + names[: r % len(names)]:
                try:
                    t, load = one_plain(launcher, Path(tmp), timeout)
                except (RuntimeError, TimeoutError) as err:
                    print(f"round {r + 1} {launcher:15s} FAILED: {err}", flush=True)
                    continue
                res[launcher].append((t, load))
                print(
                    f"round {r + 1} {launcher:15s} kill → resumed step {t:6.2f} s (checkpoint "
                    f"load {load:.3f} s)",
                    flush=True,
                )
    base = statistics.median(t for t, _ in res["torchrun"]) if res["torchrun"] else float("nan")
    print("\nSIGKILL → first resumed step, median (seconds); ratio vs torchrun")
    for n in names:
        if res[n]:
            ts = [t for t, _ in res[n]]
            print(
                f"  {n:15s} median {statistics.median(ts):6.2f}  min {min(ts):6.2f}  ratio "
                f"{statistics.median(ts) / base:5.2f}"
                f"  load {statistics.median(lo for _, lo in res[n]):.3f}  all "
                f"{' '.join(f'{t:.2f}' for t in ts)}"
            )


def main() -> None:
    """Optionally the control tally, then --rounds interleaved rounds of the chosen job."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--job",
        choices=["distrain", "plain"],
        default="distrain",
        help="see above (default distrain)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600, help="seconds per job")
    p.add_argument(
        "--control",
        type=int,
        default=0,
        help="first N kill-restarts per setting of a plain torch.distributed script "
        "(restart_tally.py)",
    )
    p.add_argument("--control-timeout", type=float, default=90)
    p.add_argument(
        "--nproc", type=int, default=2, help="--job distrain: ranks (1 on a one-GPU machine)"
    )
    args = p.parse_args()
    if args.control:
        tally(args.control, args.control_timeout)
    if args.job == "plain":
        plain_job(args.rounds, args.timeout)
    else:
        distrain_job(args.rounds, args.timeout, args.nproc)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"total {time.time() - t0:.0f} s")
