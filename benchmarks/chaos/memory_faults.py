"""The memory tier's faults (kind ``memory``: snapshots every step in ``DISTRAIN_MEMORY_DIR``,
inside the trial's folder; src/distrain/checkpoint/memory_tier/).

- ``kill_rank_in_snapshot``: a rank SIGKILLed while it writes a snapshot. Caught as fault_save.py
  catches a save: the rank is stopped (SIGSTOP) for a look every few milliseconds, and killed when
  the look finds its snapshot's temporary file (``r<rank>-s<step>.pt.part`` or its record's);
  otherwise let go. The others are a step ahead; the job must resume from a step all hold.
- ``corrupt_memory``: the launcher killed (ranks stopped a moment before, faults._kill_frozen),
  then one byte of a rank's newest snapshot flipped; the rerun must skip it with one line and
  resume from the next valid step (an older snapshot, or the disk).
- ``memory_full``: the memory root (a 32 MiB tmpfs of its own, campaign._mount_tmpfs) filled by
  another writer. A snapshot then fails on that rank, and every restart refuses at start in one
  line (docs/checkpointing.md "Memory tier": ``memory snapshots need about … MiB``); the filler
  is removed before the rerun, which resumes.
- ``lose_node_with_memory`` (kind ``nodes_static_memory``, each node its own memory root): one
  node lost whole, as a machine dies: every process in its namespace stopped (SIGSTOP), then
  SIGKILLed, and its memory root removed. The survivor stops as after any static node's loss
  (stops.py); both nodes are run again, the lost one with an empty root, and the job must resume
  from the survivor's copy of the lost node's snapshots (lost steps ≤ K + 1), bit for bit.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import psutil
from fault_save import catch_in_act
from faults import TITLE, FaultContext, Missed, Shot, _kill_frozen, _quiet, fill, ranks
from kinds import memory_folders

#: how long kill_rank_in_snapshot looks for a snapshot under way before the trial is missed
LOOK_S = 30.0


def _own(ctx: FaultContext) -> list[Path]:
    """The job's ``own/`` folders under its memory root (one per checkpoint directory)."""
    if ctx.job.memory is None:
        raise Missed("the kind has no memory tier")
    return [d / "own" for d in memory_folders(ctx.job) if (d / "own").is_dir()]


def kill_rank_in_snapshot(ctx: FaultContext) -> Shot:
    """SIGKILL of a rank while its memory snapshot is being written."""
    found = ranks(ctx.trial)
    if not found:
        raise Missed("no rank was running")
    proc = ctx.rng.choice(found)
    m = TITLE.search(" ".join(proc.cmdline()))
    rank = int(m.group(1)) if m else 0

    def parts() -> str | None:
        found = [p for d in _own(ctx) for p in d.glob(f"r{rank:05d}-s*.part")]
        return found[0].name if found else None

    seen, looks = catch_in_act(ctx, proc, parts, "snapshot")
    proc.send_signal(signal.SIGKILL)
    return Shot(f"SIGKILL rank {rank} (pid {proc.pid}) while it wrote {seen} (look {looks})")


def corrupt_memory(ctx: FaultContext) -> Shot:
    """SIGKILL of the launcher, then one byte of a rank's newest memory snapshot flipped."""
    _kill_frozen(ctx, ctx.launchers)
    left = ctx.wait_gone()  # ranks that outlive their launcher are leftovers (faults.py)
    snaps = sorted((p for d in _own(ctx) for p in d.glob("r*-s*.pt")), key=lambda p: p.name[8:])
    if not snaps:  # the job had ended well (the tier removed them) or not snapshotted yet
        raise Missed("no memory snapshot to corrupt (the launcher was SIGKILLed)")
    newest = snaps[-1].name[8:]
    victim = ctx.rng.choice([p for p in snaps if p.name[8:] == newest])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    return Shot(f"SIGKILL the launcher, corrupt memory snapshot {victim.name}", rerun=True,
                left=left)  # fmt: skip


def memory_full(ctx: FaultContext) -> Shot:
    """The memory root's filesystem filled by another writer; freed before a rerun."""
    return fill(ctx.job.memory, "the memory root", "fill the memory tier's tmpfs")


def lose_node_with_memory(ctx: FaultContext) -> Shot:
    """One node lost whole: its every process SIGKILLed, its memory root removed; run again."""
    if ctx.hosts is None or ctx.job.memory is None:
        raise Missed("the kind has no nodes with memory roots of their own")
    node = ctx.rng.randrange(len(ctx.hosts.names))
    procs, others = [], []  # others: not this process's children (the launcher is its Popen's)
    for pid in ctx.hosts.pids(node):  # the machine stops at once: nothing sees the others die
        try:
            procs.append(psutil.Process(int(pid)))
            procs[-1].send_signal(signal.SIGSTOP)
            if procs[-1].ppid() != os.getpid():
                others.append(procs[-1])
        except psutil.Error:
            continue
    import nodes

    named = nodes.named_semaphores([proc.pid for proc in procs])  # its /dev/shm dies with it
    if not any([_quiet(proc.send_signal, signal.SIGKILL) for proc in procs]):
        raise Missed(f"node {node} had no process left")
    nodes.forget(named)
    ctx.lost.add(node)
    # no write of theirs lands after the removal; psutil would reap a child of ours, and its
    # Popen then read exit 0 for a node SIGKILLed (seed 4401's first two trials: [0, 1])
    psutil.wait_procs(others, timeout=10)
    root = ctx.job.memory / f"node{node}"
    held = sorted(f"{p.parent.name}/{p.name}" for p in root.glob("distrain-mem-*/*/r*-s*.pt"))
    shutil.rmtree(root, ignore_errors=True)
    return Shot(f"SIGKILL node {node}'s {len(procs)} processes, remove its memory root "
                f"(it held {', '.join(held[-4:]) or 'no snapshot'})", rerun=True)  # fmt: skip


MEMORY_FAULTS = {
    "kill_rank_in_snapshot": (kill_rank_in_snapshot, lambda k: k.name == "memory"),
    "corrupt_memory": (corrupt_memory, lambda k: k.name == "memory"),
    "memory_full": (memory_full, lambda k: k.name == "memory"),
    "lose_node_with_memory": (lose_node_with_memory, lambda k: k.memory and k.nodes > 1),
}
