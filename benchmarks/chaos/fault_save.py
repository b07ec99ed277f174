"""The fault that kills the launcher while the script's own ``torch.save`` writes its snapshot.

A small snapshot is written in a millisecond or two, and a launcher killed at a random moment
lands in one now and then (chaos seed 60: 2 of 60 trials).  To hit one every time, the fault
catches rank 0 (the writer) *in* a save: it stops it (SIGSTOP) for a look every few
milliseconds, and when the look finds a save under way (worker/atomic_save.py's temporary file of
that process beside the snapshot, or a snapshot that does not end in its zip's end record: torch
writing in place) it SIGKILLs the launcher with the writer still stopped.  The writer then dies by
its death signal mid-write, as it would had the kill come at that instant; otherwise it is let go
(SIGCONT) and looked at again.  With distrain's atomic save the snapshot path still holds the
previous snapshot and the rerun resumes; with ``DISTRAIN_ATOMIC_SAVE=0`` it holds part of one.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from faults import TITLE, FaultContext, Missed, Shot, _quiet, ranks

#: how long the fault looks for a save under way before it calls the trial missed
LOOK_S = 30.0
#: a zip's end-of-central-directory record (22 bytes with no comment): the last thing torch writes
EOCD = b"PK\x05\x06"


def _writer(trial: str) -> psutil.Process:
    for proc in ranks(trial):
        m = TITLE.search(" ".join(proc.cmdline()))
        if m and m.group(1) == "0":
            return proc
    raise Missed("no rank 0 was running")


def _in_save(snapshot: Path, pid: int) -> str | None:
    """What shows a save under way by `pid` (stopped): its temporary file, or a partial file."""
    temps = list(snapshot.parent.glob(f".{snapshot.name}.distrain-*-{pid}.*.tmp"))
    if temps:
        return f"its temporary file {temps[0].name} ({temps[0].stat().st_size} bytes)"
    try:
        with open(snapshot, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - 22))
            tail = f.read()
    except FileNotFoundError:
        return None
    return None if tail[:4] == EOCD else f"{snapshot.name} partial ({size} bytes, no zip end)"


def _stopped(proc: psutil.Process, timeout: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.status() == psutil.STATUS_STOPPED:
            return True
        time.sleep(0.0005)
    return False


def catch_in_act(ctx: FaultContext, proc: psutil.Process, look: Callable[[], str | None],
                 act: str) -> tuple[str, int]:  # fmt: skip
    """Stop `proc` (SIGSTOP) at random moments until `look` sees it in the act (a save, a
    snapshot): returned with `proc` still stopped, and the number of looks; else Missed."""
    deadline, looks = time.monotonic() + LOOK_S, 0
    while time.monotonic() < deadline:
        try:
            proc.send_signal(signal.SIGSTOP)
            looks += 1
            if not _stopped(proc):
                proc.send_signal(signal.SIGCONT)
                continue
            seen = look()
            if seen:
                return seen, looks
            proc.send_signal(signal.SIGCONT)
        except psutil.NoSuchProcess:
            raise Missed(f"it ended before a {act} was caught ({looks} looks)") from None
        # short gaps: a save is ~1 ms of a ~50 ms epoch, and under load each look is slow (one
        # self-check run ended its job before a look fell in a save with 1–10 ms gaps)
        time.sleep(ctx.rng.uniform(0.0005, 0.003))
    _quiet(proc.send_signal, signal.SIGCONT)
    raise Missed(f"no {act} under way in {looks} looks over {LOOK_S:.0f} s")


def kill_launcher_in_save(ctx: FaultContext) -> Shot:
    """SIGKILL of the launcher while rank 0's ``torch.save`` of its snapshot is under way."""
    assert ctx.job.marker is not None
    snapshot, writer = ctx.job.marker, _writer(ctx.trial)
    seen, looks = catch_in_act(ctx, writer, lambda: _in_save(snapshot, writer.pid), "save")
    ctx.launcher.send_signal(signal.SIGKILL)
    left = ctx.wait_gone()
    return Shot(
        f"SIGKILL the launcher while rank 0 saved (look {looks}: {seen})", rerun=True, left=left
    )
