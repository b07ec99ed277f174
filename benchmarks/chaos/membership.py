"""Which processes belong to a trial: what a process *is*, not where it sits.

Every command a trial starts runs inside a cgroup made for the trial (v2 where the unified
hierarchy takes members, else v1's `pids` hierarchy): a process created below it stays a member
however it moves (setsid, a double fork reparented to init), renames itself, clears its
environment or closes its fds; only a write to another cgroup's `cgroup.procs`, which no job does,
takes it out.  Where no cgroup can be made (not root, no cgroupfs) the campaign says so in one line
and falls back to the two older ways: the launcher's descendants polled every 0.2 s, and the
trial's mark (``CHAOS_TRIAL=<id>``) in a process's environment.

A PID namespace per trial was the other way: it is not used because when its first process (the
launcher) dies the kernel kills every process inside, which hides exactly the leftovers the
oracle must see (ranks without their death signal), and a two-node kind's launchers run under
`ip netns exec`, outside any one namespace of the trial.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import psutil

TRIAL_VAR = "CHAOS_TRIAL"
#: the hierarchies tried, in order (v2 first; gVisor and older hosts mount v1's pids beside it)
ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/pids"))
#: trial -> its cgroup folder (None: none could be made for it)
_GROUPS: dict[str, Path | None] = {}
#: trial -> {pid: create_time} of every process seen below the trial's launcher
_SEEN: dict[str, dict[int, float]] = {}
_SAID: list[str] = []


def cgroup(trial: str) -> Path | None:
    """The trial's cgroup, made at the first call; None (said once) where none can be made
    (or CHAOS_CGROUP=0: the older ways alone, to show what they miss)."""
    if trial in _GROUPS:
        return _GROUPS[trial]
    why = ["CHAOS_CGROUP=0"] if os.environ.get("CHAOS_CGROUP") == "0" else []
    for root in ROOTS if not why else ():
        if not (root / "cgroup.procs").exists():
            continue
        path = root / f"chaos-{trial}"
        try:
            path.mkdir(exist_ok=True)
            (path / "cgroup.procs").read_text()
        except OSError as err:
            why.append(f"{root}: {err.strerror}")
            continue
        _GROUPS[trial] = path
        return path
    _GROUPS[trial] = None
    if not _SAID:
        _SAID.append(trial)
        print(f"chaos: no cgroup per trial ({'; '.join(why) or 'no cgroupfs'}): leftovers are "
              "found by the process tree and the trial's mark only", file=sys.stderr)  # fmt: skip
    return None


def wrap(trial: str, argv: list[str]) -> list[str]:
    """`argv` run as a member of the trial's cgroup (it joins, then execs: the same pid)."""
    path = cgroup(trial)
    if path is None:
        return argv
    join = 'echo $$ > "$0" && exec "$@"'
    # through this process's root: `ip netns exec` mounts a sysfs of its own over /sys, where
    # the cgroup folders are not (a two-node kind's launchers start inside it)
    procs = f"/proc/{os.getpid()}/root{path / 'cgroup.procs'}"
    return ["sh", "-c", join, procs, *argv]


def members(trial: str) -> list[int]:
    """The pids in the trial's cgroup (none where it has none)."""
    path = _GROUPS.get(trial)
    if path is None:
        return []
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def remove(trial: str, timeout: float = 10.0) -> None:
    """Remove the trial's cgroup once its members are gone (killed by the caller)."""
    path = _GROUPS.pop(trial, None)
    if path is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                print(f"chaos: cgroup {path} still busy: {members(trial)}", file=sys.stderr)
                return
            time.sleep(0.2)


def remove_all() -> None:
    """Every cgroup this campaign made (its end, a crash or a signal)."""
    for trial in list(_GROUPS):
        for pid in members(trial):
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        remove(trial, timeout=5.0)


def follow(trial: str, launcher: int) -> None:
    """Record the launcher's descendants every 0.2 s until it has ended (a daemon thread).

    The environment alone does not find them: a title longer than the command line (setproctitle)
    overwrites the memory that /proc/PID/environ shows, so a rank's environment reads as its title.
    """

    def loop() -> None:
        seen = _SEEN.setdefault(trial, {})
        try:
            root = psutil.Process(launcher)
            while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
                for proc in root.children(recursive=True):
                    try:
                        seen.setdefault(proc.pid, proc.create_time())
                    except psutil.Error:
                        continue
                time.sleep(0.2)
        except psutil.Error:
            pass

    threading.Thread(target=loop, daemon=True).start()


def trial_processes(trial: str, cgroup: bool = True) -> list[psutil.Process]:
    """Every live process of the trial (zombies left out): in its cgroup, seen below its
    launcher, or carrying its mark in the environment (a process started after the launcher's
    end); `cgroup=False`: the older two ways only (what the oracle saw before the cgroup)."""
    found: dict[int, psutil.Process] = {}
    for pid in members(trial) if cgroup else []:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and pid != os.getpid():
                found[pid] = proc
        except psutil.Error:
            continue
    for pid, created in list(_SEEN.get(trial, {}).items()):
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                found[pid] = proc
        except psutil.Error:
            continue
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(TRIAL_VAR) == trial:
                found[proc.pid] = proc
        except (psutil.Error, OSError):
            continue
    return list(found.values())
