"""Random-kill campaign: N jobs SIGKILLed at random, each compared bit for bit with a clean run.

    python3 benchmarks/recovery/campaign.py --kind digits --kills 20
    python3 benchmarks/recovery/campaign.py --kind imagefolder --kills 20

Kinds (both real examples, under ``distrain run -n 2 --max-restarts 3``):

- ``digits``: examples/train_digits.py, a CNN with plain BatchNorm, 8 epochs, checkpoint every 5
  steps;
- ``imagefolder``: examples/train_imagefolder.py (ResNet-18: BatchNorm, RandomResizedCrop and
  flip) on a generated folder of 48 small images, read by 2 DataLoader workers per rank.

Each kill waits for the first checkpoint, then a random delay drawn over the rest of the
uninterrupted run's duration, and SIGKILLs a random rank (or, for imagefolder, one of that
rank's DataLoader workers half of the time); pids come from ``--run-dir``'s metrics files, as
``distrain top`` reads them.  Prints ``k/N finished bitwise equal`` and every trial's line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
sys.path.insert(0, str(REPO / "tests"))


def image_folder(root: Path) -> Path:
    from helpers.images import (
        class_folders,  # tests/helpers: the same data set as the imagefolder test
    )

    class_folders(root, per_class=16, seed=1)
    return root


def command(kind: str, work: Path, name: str) -> list[str]:
    launcher = [
        PY,
        "-m",
        "distrain.cli",
        "run",
        "-n",
        "2",
        "--max-restarts",
        "3",
        "--run-dir",
        str(work / f"{name}-run"),
    ]
    if kind == "digits":
        return launcher + [
            str(REPO / "examples" / "train_digits.py"),
            "--epochs",
            "8",
            "--out",
            str(work / name),
            "--checkpoint-dir",
            str(work / f"{name}-ckpt"),
            "--checkpoint-every",
            "5",
        ]
    return launcher + [
        str(REPO / "examples" / "train_imagefolder.py"),
        "--data",
        str(work / "images"),
        "--arch",
        "resnet18",
        "--image-size",
        "32",
        "--epochs",
        "3",
        "--batch-size",
        "4",
        "--workers",
        "2",
        "--out",
        str(work / name),
        "--checkpoint-dir",
        str(work / f"{name}-ckpt"),
        "--checkpoint-every",
        "2",
    ]


def start(cmd: list[str]) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_checkpoint(proc: subprocess.Popen[str], ckpt: Path) -> float:
    while not (ckpt / "latest").exists():
        if proc.poll() is not None:
            raise RuntimeError(
                f"the job ended (exit {proc.returncode}) before its first "
                f"checkpoint:\n{proc.stderr.read()[-2000:]}"
            )
        time.sleep(0.01)
    return time.monotonic()


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"exit {proc.returncode}:\n{err[-3000:]}")
    return out


def victim(run_dir: Path, rank: int, worker: bool) -> tuple[psutil.Process, str] | None:
    """The rank's process (or one of its DataLoader workers); None once the rank has finished."""
    pid = int(
        json.loads((run_dir / "metrics" / f"rank-{rank}.jsonl").read_text().splitlines()[-1])["pid"]
    )
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        children = proc.children() if worker else []
    except psutil.NoSuchProcess:
        return None
    return (
        (children[0], f"a DataLoader worker of rank {rank}") if children else (proc, f"rank {rank}")
    )


def model_differences(a: Path, b: Path) -> list[str]:
    sa, sb = (
        torch.load(a / "model.pt", weights_only=True),
        torch.load(b / "model.pt", weights_only=True),
    )
    return [k for k in sa if not torch.equal(sa[k], sb[k])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=["digits", "imagefolder"], default="digits")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=None, help="replay a campaign (default: a new one)")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="campaign-") as tmp:
        work = Path(tmp)
        if args.kind == "imagefolder":
            image_folder(work / "images")
        ref = start(command(args.kind, work, "ref"))
        first = wait_for_checkpoint(ref, work / "ref-ckpt")
        finish(ref)
        span = time.monotonic() - first  # how long training goes on after the first checkpoint
        print(
            f"{args.kind}: uninterrupted run trains {span:.1f} s after its first checkpoint; "
            f"campaign seed {seed}",
            flush=True,
        )
        equal = trial = missed = 0
        while trial < args.kills:
            name = f"k{trial + 1}-{missed}"
            rank, delay = rng.choice([0, 1]), rng.uniform(0.0, 0.9 * span)
            worker = args.kind == "imagefolder" and rng.random() < 0.5
            proc = start(command(args.kind, work, name))
            what = f"rank {rank}"
            try:
                wait_for_checkpoint(proc, work / f"{name}-ckpt")
                time.sleep(delay)
                target = victim(work / f"{name}-run", rank, worker)
                if (
                    target is None or proc.poll() is not None
                ):  # the span includes the end: a late draw can miss
                    missed += 1
                    print(
                        f"  (a kill {delay:.2f} s after the first checkpoint came after rank "
                        f"{rank} finished: drawn again)",
                        flush=True,
                    )
                    finish(proc)
                    continue
                target[0].send_signal(signal.SIGKILL)
                what = target[1]
                out = finish(proc)
                resumed = "resumed from" in out
                diff = model_differences(work / "ref", work / name)
            except (RuntimeError, OSError, psutil.Error, subprocess.TimeoutExpired) as err:
                resumed, diff = (
                    False,
                    [
                        "error: "
                        + (
                            str(err).strip().splitlines()[0]
                            if str(err).strip()
                            else type(err).__name__
                        )
                    ],
                )
            finally:
                if proc.poll() is None:
                    proc.kill()
            trial += 1
            ok = resumed and not diff
            equal += ok
            verdict = (
                "bitwise equal"
                if ok
                else ("DIFFERS in " + ", ".join(diff[:4]) if diff else "did not resume")
            )
            print(
                f"  kill {trial:2d}: {what} SIGKILLed {delay:.2f} s after the first "
                f"checkpoint -> {verdict}",
                flush=True,
            )
    print(
        f"{args.kind}: {equal}/{args.kills} finished bitwise equal ({missed} draws fell after the "
        "rank finished and were "
        f"drawn again; campaign seed {seed})"
    )


if __name__ == "__main__":
    main()
