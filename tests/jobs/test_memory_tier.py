"""The checkpointer's memory tier (checkpoint/memory_tier/): real `distrain run` jobs on gloo.

A rank SIGKILLed mid-run resumes from the snapshot in tmpfs of the step before it died and ends
bit for bit equal to an uninterrupted run; a torn snapshot is skipped with one line; a newer
disk step wins; the folder is removed after a good end, kept after a failure, swept when its
job's launcher is gone; a tmpfs too small is refused at start.  Each test gives its jobs a
memory root of their own (``DISTRAIN_MEMORY_DIR``) except the one that checks /dev/shm itself.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import distrain_run, run
from helpers.checkpoints import DISTRAIN, WORKER, assert_bitwise, ok, shared_baseline

JOB_TIMEOUT = 180  # a hang fails the test; not a speed assertion
#: the worker's job: 2 epochs of 8 steps, disk checkpoints only at the end (every 100)
ARGS = ["--every", "100", "--epochs", "2"]
RESUMED = re.compile(r"distrain: resumed from (.+?) \(step (\d+),")


def job(
    tmp: Path, name: str, *args: str, root: Path | None, restarts: int = 0
) -> subprocess.CompletedProcess[str]:
    """`distrain run -n 2` of the checkpoint worker with the memory tier every step."""
    cmd = ["-n", "2", *(["--max-restarts", str(restarts)] if restarts else [])]
    cmd += [WORKER, "--dir", str(tmp / "ckpt"), "--out", str(tmp / f"{name}.pt"), *ARGS, *args]
    env = {"DISTRAIN_MEMORY_DIR": str(root)} if root is not None else None
    return distrain_run(*cmd, timeout=JOB_TIMEOUT, env=env)


def resumed_at(stdout: str) -> tuple[str, int]:
    m = RESUMED.search(stdout)
    assert m, f"no resume in:\n{stdout[-3000:]}"
    return m.group(1), int(m.group(2))


def job_folders(root: Path) -> list[Path]:
    return sorted(root.glob("distrain-mem-*"))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "ddp-async"])
def test_sigkill_resumes_from_memory_bitwise(
    strategy: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, mem_root: Path
) -> None:
    """THE test: K=1, a rank killed at a random step loses at most 1 step and ends bit for bit
    (DDP: each rank's snapshot holds the whole replica; FSDP: its shards).  With async_save a
    snapshot still being written when the rank dies is lost too: at most 2 steps."""
    seed = int(os.environ.get("DTEST_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    at, rank = rng.randint(2, 15), rng.choice([0, 1])
    what = f"{strategy}: SIGKILL of rank {rank} after step {at} (DTEST_SEED={seed})"
    flags = ["--strategy", strategy.split("-")[0]]
    reference = shared_baseline(
        tmp_path_factory, f"memtier-{strategy}", "--dir", str(tmp_path / "ref"), *ARGS, *flags
    )
    kill = ["--kill-at", str(at), "--fault-rank", str(rank)]
    if strategy.endswith("-async"):
        kill.append("--async-save")
    result = ok(job(tmp_path, "killed", "--memory-every", "1", *kill, *flags, root=mem_root,
                    restarts=2))  # fmt: skip
    where, step = resumed_at(result.stdout)
    assert where.startswith(f"memory {mem_root}/distrain-mem-"), f"{what}: resumed from {where}"
    bound = 2 if strategy.endswith("-async") else 1
    assert at - step <= bound, f"{what}: resumed at step {step}, {at - step} steps lost"
    assert_bitwise(reference, tmp_path / "killed.pt")
    assert job_folders(mem_root) == [], f"{what}: left behind {job_folders(mem_root)}"


def test_nothing_left_in_dev_shm(tmp_path: Path) -> None:
    """The default root is /dev/shm: used by the job (it resumed from it), empty after its end."""
    from distrain.checkpoint.handles import NodePlace

    folder = Path(NodePlace().folder(str(tmp_path / "ckpt")))  # the job's own: named by its dir
    try:
        result = ok(job(tmp_path, "killed", "--memory-every", "1", "--kill-at", "5", root=None,
                        restarts=1))  # fmt: skip
        where, _ = resumed_at(result.stdout)
        assert where.startswith(f"memory {folder}/own/"), where
        assert not folder.exists(), f"{folder} left in /dev/shm after a finished job"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_torn_snapshot_skipped_and_kept_after_failure(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, mem_root: Path
) -> None:
    """A failed job keeps its snapshots; the rerun skips a torn one with one line, resumes from
    the step before, and ends bit for bit."""
    reference = shared_baseline(tmp_path_factory, "memtier", "--dir", str(tmp_path / "ref"), *ARGS)
    failed = job(tmp_path, "failed", "--memory-every", "1", "--kill-at", "7", root=mem_root)
    assert failed.returncode != 0
    (folder,) = job_folders(mem_root)
    newest = sorted((folder / "own").glob("r00000-s*.pt"))[-1]  # rank 0's step 6
    assert newest.name == "r00000-s00000006.pt", sorted(os.listdir(folder / "own"))
    with open(newest, "r+b") as f:  # a torn write: the record says more bytes than are there
        f.truncate(newest.stat().st_size // 2)
    result = ok(job(tmp_path, "rerun", "--memory-every", "1", root=mem_root))
    assert "skipping memory snapshot" in result.stderr and "r00000-s00000006.pt" in result.stderr
    where, step = resumed_at(result.stdout)
    assert where.startswith("memory ") and step == 5, f"resumed from {where} (step {step})"
    assert_bitwise(reference, tmp_path / "rerun.pt")
    assert job_folders(mem_root) == []


def test_sweep_and_refusal(tmp_path: Path, mem_root: Path) -> None:
    """An ended job's folder is swept with one line; a live one's is left; too small refuses."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    identity = open("/proc/sys/kernel/random/boot_id").read().strip()
    ns = os.stat("/proc/self/ns/pid").st_ino
    ended, live = mem_root / "distrain-mem-ended", mem_root / "distrain-mem-live"
    for folder, pid in ((ended, dead.pid), (live, os.getpid())):
        (folder / "own").mkdir(parents=True)
        (folder / "owner").write_text(f"{identity}:{ns}:{pid}")
    result = ok(job(tmp_path, "swept", "--memory-every", "1", root=mem_root))
    assert f"removing {ended}: the memory snapshots of an ended job" in result.stderr
    assert not ended.exists() and live.exists()


AUTO_LINE = re.compile(
    r"distrain: memory snapshots every (\d+) steps? \(([\d.]+) ms each, ([\d.]+) % of a step\)"
)


def test_auto_chooses_k_and_resumes_within_k(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, mem_root: Path
) -> None:
    """K="auto" says its choice in one line (≤ 2 % of a step by its own measure), and a rank
    killed after it loses at most K steps (+1: the step it died in) and ends bit for bit."""
    sleepy = ["--step-sleep", "0.05"]  # steps of ~50 ms: K small enough to snapshot in 16 steps
    reference = shared_baseline(
        tmp_path_factory, "memtier-sleepy", "--dir", str(tmp_path / "ref"), *ARGS, *sleepy
    )
    result = ok(
        job(
            tmp_path,
            "auto",
            "--memory-every",
            "auto",
            "--kill-at",
            "13",
            *sleepy,
            root=mem_root,
            restarts=1,
        )  # fmt: skip
    )
    lines = AUTO_LINE.findall(result.stdout)
    assert lines, f"no choice said:\n{result.stdout[-2000:]}"
    every, _, share = lines[0]
    assert float(share) <= 2.0, lines[0]
    where, step = resumed_at(result.stdout)
    assert where.startswith("memory "), where
    assert 13 - step <= int(every) + 1, f"resumed at {step} with K={every}"
    assert_bitwise(reference, tmp_path / "auto.pt")


def test_tmpfs_too_small_is_refused_at_start(tmp_path: Path, mem_root: Path) -> None:
    """A memory root that cannot hold the snapshots (a 256 KiB tmpfs of the job's own mount
    namespace): one line at start naming the room needed, no training, no traceback."""
    lines = _refusals_on_a_small_tmpfs(tmp_path, mem_root / "small", "256k")
    assert "which has 0.2 MiB free" in lines[0], lines


def test_a_job_without_the_tier_loads_none_of_its_modules(tmp_path: Path) -> None:
    """The tier is behind a seam: a checkpointer that does not ask for it imports none of it."""
    code = (
        "import sys, torch; from distrain.checkpoint import Checkpointer, JobHandles\n"
        f"c = Checkpointer(JobHandles(), {str(tmp_path / 'ckpt')!r}, every_steps=1,"
        " handle_signals=False)\n"
        "m = torch.nn.Linear(2, 2); c.restore(model=m); c.maybe_save(1); c.close()\n"
        "print(sorted(n for n in sys.modules if n.startswith('distrain.checkpoint.')"
        " and '.memory_tier' in n))"
    )
    result = run([*DISTRAIN[:1], "-c", code], timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_a_memory_root_not_made_yet_is_made_not_refused(tmp_path: Path, mem_root: Path) -> None:
    """DISTRAIN_MEMORY_DIR that does not exist yet: the node's first rank makes it; every other
    rank measures its room only after that (it measured a missing folder as 0 MiB free and the
    job refused at start, 1 of 2 uninterrupted runs of the chaos campaign's memory kind)."""
    root = mem_root / "not" / "made"
    cmd = ["-n", "4", WORKER, "--dir", str(tmp_path / "ckpt"), "--out", str(tmp_path / "x.pt"),
           "--global-batch", "16", *ARGS, "--memory-every", "1"]  # fmt: skip
    result = distrain_run(*cmd, timeout=JOB_TIMEOUT, env={"DISTRAIN_MEMORY_DIR": str(root)})
    ok(result)
    assert "memory snapshots need" not in result.stderr
    assert job_folders(root) == []  # removed after the good end


def test_a_full_tmpfs_is_refused_in_one_line(tmp_path: Path, mem_root: Path) -> None:
    """A memory root whose tmpfs another writer filled (the chaos campaign's memory_full, at a
    restart): the node's first rank cannot even write the folder's owner file; the job still
    refuses in the one line, naming why (before: an OSError traceback from that write)."""
    fill = f'dd if=/dev/zero of="{mem_root / "full"}/.filler" bs=64k 2>/dev/null'
    lines = _refusals_on_a_small_tmpfs(tmp_path, mem_root / "full", "4m", fill)
    assert "No space left on device" in lines[-1], lines


def _refusals_on_a_small_tmpfs(tmp_path: Path, small: Path, size: str, fill: str = "") -> list[str]:
    """Run a memory-tier job whose memory root is a tmpfs of `size` in the job's own mount
    namespace (first filled by `fill`, a shell command); it must fail without a traceback or
    training: its "memory snapshots need about" lines, at least one."""
    small.mkdir()
    cmd = [*DISTRAIN, "-n", "2", WORKER, "--dir", str(tmp_path / "ckpt"), "--out",
           str(tmp_path / "x.pt"), *ARGS, "--memory-every", "1"]  # fmt: skip
    before = f"{fill}; " if fill else ""  # dd ends in "no space left": go on regardless
    mounted = ["unshare", "-m", "sh", "-c",
               f'mount -t tmpfs -o size={size} tmpfs "{small}" && {before}exec "$@"', "sh",
               *cmd]  # fmt: skip
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespaces here: {probe.stderr.decode().strip()}")
    result = run(mounted, timeout=JOB_TIMEOUT, env={"DISTRAIN_MEMORY_DIR": str(small)})
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if "memory snapshots need about" in ln]
    assert lines, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "finished at step" not in result.stdout
    return lines


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_rerun_on_fewer_ranks(strategy: str, tmp_path: Path, mem_root: Path) -> None:
    """A 2-rank job dies (rank 1 SIGKILLed after step 7, disk every 4); the user reruns it on 1.
    DDP: the snapshot of step 6, taken on 2 ranks, resumes it (old rank 0's, said).  FSDP: a
    sharded snapshot is not resharded: one line, and the disk's step 4 resumes it.  Either way
    nothing is left in the memory root after the rerun's good end."""
    flags = ["--strategy", strategy, "--every", "4"]
    failed = job(tmp_path, "killed", "--memory-every", "1", "--kill-at", "7", *flags, root=mem_root)
    assert failed.returncode != 0, failed.stdout[-2000:]
    cmd = [WORKER, "--dir", str(tmp_path / "ckpt"), "--out", str(tmp_path / "rerun.pt")]
    env = {"DISTRAIN_MEMORY_DIR": str(mem_root)}
    cmd += [*ARGS, "--memory-every", "1", *flags]
    rerun = ok(distrain_run("-n", "1", *cmd, timeout=JOB_TIMEOUT, env=env))
    where, step = resumed_at(rerun.stdout)
    if strategy == "ddp":
        assert where == "memory, old rank 0's snapshot of step 6 (saved on 2 ranks)", where
        assert step == 6
    else:
        assert "taken on another world size with sharded (FSDP) state: resuming from disk" in (
            rerun.stdout
        ), rerun.stdout[-3000:]
        assert where.endswith("step_00000004") and step == 4, where
    assert job_folders(mem_root) == [], [str(p) for p in mem_root.rglob("*")]
