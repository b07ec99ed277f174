"""A trial's processes: found by its cgroup (or its mark) and inside its namespaces, dumped,
killed, counted."""

from __future__ import annotations

import signal
import subprocess
import time
import typing
from pathlib import Path

import nodes
import psutil
from membership import trial_processes

if typing.TYPE_CHECKING:
    from helpers.netns_hosts import Hosts


def _live(trial: str, made: Hosts | None) -> list[psutil.Process]:
    """The trial's live processes, and any process inside its namespaces."""
    found = {p.pid: p for p in trial_processes(trial)}
    for pid in nodes.pids_inside(made) if made is not None else []:
        try:
            found.setdefault(pid, psutil.Process(pid))
        except psutil.Error:
            continue
    return [p for p in found.values() if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def dump_stacks(trial: str, path: Path, made: Hosts | None = None) -> None:
    """py-spy dumps of every process of a hung trial, for its root cause."""
    with open(path, "w") as f:
        for proc in _live(trial, made):
            try:
                cmd = " ".join(proc.cmdline())[:200]
            except psutil.Error:
                cmd = "?"
            res = subprocess.run(["py-spy", "dump", "--pid", str(proc.pid)], capture_output=True,
                                 text=True, timeout=30, check=False)  # fmt: skip
            f.write(f"== pid {proc.pid} {cmd}\n{res.stdout}{res.stderr}\n")


def kill_all(trial: str, made: Hosts | None = None) -> list[str]:
    """SIGCONT then SIGKILL every process of the trial (and in its namespaces); a line for each."""
    found = []
    old = {p.pid for p in trial_processes(trial, cgroup=False)}
    if made is not None:
        old |= set(nodes.pids_inside(made))
    for proc in _live(trial, made):
        try:
            only = "" if proc.pid in old else " [cgroup only]"
            found.append(f"pid {proc.pid} {' '.join(proc.cmdline())[:80]}{only}")
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        except psutil.Error:
            pass
    return found


def leftovers(trial: str, grace: float = 10.0, made: Hosts | None = None) -> list[str]:
    """The trial's processes (or its namespaces') alive `grace` s after its launchers ended."""
    deadline = time.monotonic() + grace
    while _live(trial, made) and time.monotonic() < deadline:
        time.sleep(0.2)
    return kill_all(trial, made)
