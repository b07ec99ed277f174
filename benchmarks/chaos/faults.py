"""The faults of the chaos campaign, and how a trial finds the process each one hits.

A trial's processes are its cgroup's members (membership.py; where none can be made, those seen
below its launcher and those whose environment carries ``CHAOS_TRIAL=<id>``). Among them a
*rank* carries distrain's title (``distrain rank R/W``) and a parent without it (a DataLoader
worker is a rank's child and inherits the title); a script that starts its own workers
(mp.spawn) carries the title and its children, the job's ranks, run ``multiprocessing.spawn``;
the lighthouse runs ``torchft_lighthouse``. A two-node kind has one launcher per node (each
inside its network namespace); a fault on "the launcher" picks one.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from kinds import Job, Kind
from membership import trial_processes

if TYPE_CHECKING:
    from helpers.netns_hosts import Hosts

#: a worker's title (worker/start/title.py); a forked worker's /proc environ is its fork server's
TITLE = re.compile(r"distrain rank (\d+)/(\d+)")


def ranks(trial: str, spawned_first: bool = True) -> list[psutil.Process]:
    """The trial's rank processes (not their DataLoader workers, which inherit the title); a
    self-starting script's spawned children where it has them, unless not `spawned_first`."""
    out, spawned = [], []
    for proc in trial_processes(trial):
        own = " ".join(_cmdline(proc))
        try:
            parent = proc.parent()
        except psutil.Error:
            continue
        above = " ".join(_cmdline(parent)) if parent is not None else ""
        if "multiprocessing.spawn" in own and TITLE.search(above):
            spawned.append(proc)
        elif TITLE.search(own) and not TITLE.search(above):
            out.append(proc)
    return sorted((spawned if spawned_first else []) or out, key=lambda p: p.pid)


def _rank_name(proc: psutil.Process) -> str:
    m = TITLE.search(" ".join(_cmdline(proc)))
    return f"rank {m.group(1)} (pid {proc.pid})" if m else f"child pid {proc.pid}"


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.Error, OSError):
        return []


def lighthouse(trial: str) -> psutil.Process | None:
    """The trial's TorchFT lighthouse, if it runs one."""
    return next(
        (p for p in trial_processes(trial) if "torchft_lighthouse" in " ".join(_cmdline(p))), None
    )


@dataclass
class Shot:
    """What a fault did: a line for the table, and what the trial must do next."""

    what: str
    rerun: bool = False  # the user's answer is to run the same command again
    bound_extra: float = 0.0  # seconds the job may take longer because of this fault
    after: Callable[[], None] | None = None  # undo before the rerun (free the disk)
    #: processes that outlived their killed launcher while the fault waited (leftovers)
    left: list[str] = field(default_factory=list)


class Missed(Exception):
    """The fault found nothing to hit (the job had finished or not started that part)."""


def _signal(proc: psutil.Process, sig: int, what: str) -> str:
    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        raise Missed(f"{what} had already ended") from None
    return what


def _pick_rank(trial: str, rng: random.Random) -> tuple[psutil.Process, str]:
    found = ranks(trial)
    if not found:
        seen = [" ".join(_cmdline(p))[:30] for p in trial_processes(trial)]
        raise Missed(f"no rank was running (the job's processes: {seen})")
    proc = rng.choice(found)
    return proc, _rank_name(proc)


def kill_rank(ctx: FaultContext) -> Shot:
    """SIGKILL of one rank."""
    proc, who = _pick_rank(ctx.trial, ctx.rng)
    return Shot(_signal(proc, signal.SIGKILL, f"SIGKILL {who}"))


def kill_loader_worker(ctx: FaultContext) -> Shot:
    """SIGKILL of one DataLoader worker of one rank."""
    proc, who = _pick_rank(ctx.trial, ctx.rng)
    children = [c for c in proc.children() if c.status() != psutil.STATUS_ZOMBIE]
    if not children:
        raise Missed(f"{who} had no DataLoader worker")
    return Shot(
        _signal(ctx.rng.choice(children), signal.SIGKILL, f"SIGKILL a DataLoader worker of {who}")
    )


def kill_any_process(ctx: FaultContext) -> Shot:
    """SIGKILL of any process of the job but the launcher: a rank, a DataLoader worker, the fork
    server, multiprocessing's resource tracker, the lighthouse, a replica group's launcher."""
    found = [p for p in trial_processes(ctx.trial) if p.pid != ctx.launcher.pid]
    if not found:
        raise Missed("no process below the launcher")
    proc = ctx.rng.choice(sorted(found, key=lambda p: p.pid))
    name = " ".join(_cmdline(proc))[:60] or "?"
    return Shot(_signal(proc, signal.SIGKILL, f"SIGKILL pid {proc.pid} ({name})"), rerun=True)


def kill_launcher(ctx: FaultContext) -> Shot:
    """SIGKILL of `distrain run` itself (the node's launcher); the user runs it again."""
    _kill_frozen(ctx, [ctx.launcher])
    return Shot("SIGKILL the launcher", rerun=True)


def _kill_frozen(ctx: FaultContext, launchers: list[psutil.Process]) -> None:
    """SIGKILL `launchers` with every rank of the trial stopped (SIGSTOP) a moment before: the
    kernel delivers a death signal (SIGKILL) to a stopped rank too; a rank without one stays
    until the leftover look, where running it could finish first (self-check death_signal_off).
    Loader workers and a self-started script's children run on: they end with their rank (their
    watch is a thread, which a stopped child never runs: seed 9302 trials 68 and 80)."""
    frozen = ranks(ctx.trial, spawned_first=False)
    for proc in frozen:
        _quiet(proc.send_signal, signal.SIGSTOP)
    if not any([_quiet(launcher.send_signal, signal.SIGKILL) for launcher in launchers]):
        for proc in frozen:  # the job had ended already: nothing to observe, nothing to hold
            _quiet(proc.send_signal, signal.SIGCONT)
        raise Missed("the launcher had already ended")


def _pick_node(ctx: FaultContext) -> int:
    return ctx.rng.randrange(len(ctx.launchers))


def sigterm_launcher(ctx: FaultContext) -> Shot:
    """SIGTERM to `distrain run` (a preemption; one node's on a two-node kind); run again."""
    if len(ctx.launchers) == 1:
        return Shot(_signal(ctx.launcher, signal.SIGTERM, "SIGTERM the launcher"), rerun=True)
    node = _pick_node(ctx)
    ctx.lost.add(node)
    return Shot(
        _signal(ctx.launchers[node], signal.SIGTERM, f"SIGTERM node {node}'s launcher"), rerun=True
    )


def kill_node_launcher(ctx: FaultContext) -> Shot:
    """SIGKILL of one node's `distrain run` (two-node kinds); an elastic job goes on without it,
    a static one is run again."""
    node = _pick_node(ctx)
    ctx.lost.add(node)
    return Shot(
        _signal(ctx.launchers[node], signal.SIGKILL, f"SIGKILL node {node}'s launcher"), rerun=True
    )


def link_down(ctx: FaultContext) -> Shot:
    """One node's link down for 2–8 s, then up again (both ends of its veth)."""
    import nodes

    assert ctx.hosts is not None
    node, seconds = _pick_node(ctx), ctx.rng.uniform(2.0, 8.0)
    nodes.link(ctx.hosts, node, up=False)
    time.sleep(seconds)
    nodes.link(ctx.hosts, node, up=True)
    return Shot(f"node {node}'s link down for {seconds:.1f} s", rerun=True, bound_extra=seconds)


def link_tbf(ctx: FaultContext) -> Shot:
    """One node's link throttled (tc tbf 1 Mbit/s, 32 kbit burst, 400 ms latency) for 5–20 s."""
    import nodes

    assert ctx.hosts is not None
    node, seconds = _pick_node(ctx), ctx.rng.uniform(5.0, 20.0)
    nodes.throttle(ctx.hosts, node, on=True)
    made = ctx.hosts
    threading_timer(seconds, lambda: _quiet(nodes.throttle, made, node, False))
    return Shot(
        f"node {node}'s link throttled to 1mbit (tbf) for {seconds:.1f} s",
        rerun=True,
        bound_extra=seconds,
    )


def stop_rank(ctx: FaultContext, resume_after: float | None = None) -> Shot:
    """SIGSTOP of one rank for longer than the watchdog; SIGCONT after `resume_after` s or never."""
    proc, who = _pick_rank(ctx.trial, ctx.rng)
    _signal(proc, signal.SIGSTOP, who)
    if resume_after is not None:
        threading_timer(resume_after, lambda: _quiet(proc.send_signal, signal.SIGCONT))
        return Shot(f"SIGSTOP {who}, SIGCONT after {resume_after:.0f} s", bound_extra=resume_after)
    return Shot(f"SIGSTOP {who} for good", bound_extra=ctx.watchdog)


def stop_rank_resumed(ctx: FaultContext) -> Shot:
    """SIGSTOP of one rank, resumed after twice the watchdog's time."""
    return stop_rank(ctx, resume_after=2.0 * ctx.watchdog)


def kill_lighthouse(ctx: FaultContext) -> Shot:
    """SIGKILL of the TorchFT lighthouse (replica kinds)."""
    proc = lighthouse(ctx.trial)
    if proc is None:
        raise Missed("no lighthouse was running")
    return Shot(_signal(proc, signal.SIGKILL, "SIGKILL the lighthouse"), rerun=True)


def kill_lighthouse_in_heal(ctx: FaultContext) -> Shot:
    """SIGKILL of a rank, then of the lighthouse while the replacement heals: when its group logs
    a heal, or 0.2–1.5 s after the replacement's script started, whichever comes first."""
    light = lighthouse(ctx.trial)
    if light is None:
        raise Missed("no lighthouse was running")
    starts = ctx.job.out / "starts"
    before = len(starts.read_text().splitlines()) if starts.exists() else 0
    err = ctx.logs.with_suffix(".err") if ctx.logs else None

    def heals() -> int:
        return err.read_text(errors="replace").count("healed from") if err and err.exists() else 0

    heals_before = heals()
    first = kill_rank(ctx)
    deadline, started, healed = time.monotonic() + 120, None, False
    while time.monotonic() < deadline:
        healed = heals() > heals_before
        if healed:
            break
        if started is None and starts.exists() and len(starts.read_text().splitlines()) > before:
            started = time.monotonic() + ctx.rng.uniform(0.2, 1.5)
        if started is not None and time.monotonic() >= started:
            break
        if not light.is_running():
            raise Missed(f"{first.what}; the lighthouse had ended before the heal")
        time.sleep(0.05)
    when = (
        "at its heal line"
        if healed
        else "after the replacement started"
        if started
        else "(no replacement seen)"
    )
    _signal(light, signal.SIGKILL, "the lighthouse")
    return Shot(f"{first.what}; then SIGKILL the lighthouse {when}", rerun=True)


def kill_group_launcher(ctx: FaultContext) -> Shot:
    """SIGKILL of one replica group's own `distrain run` (a child of the job's launcher that
    carries DISTRAIN_REPLICA_GROUP): the job restarts that group, which heals from a live one."""
    found = []
    for proc in trial_processes(ctx.trial):
        try:
            group = proc.environ().get("DISTRAIN_REPLICA_GROUP")
            parent = proc.ppid()
        except (psutil.Error, OSError):
            continue
        if group is not None and parent == ctx.launcher.pid:
            found.append((int(group), proc))
    if not found:
        raise Missed("no replica group's launcher was running")
    group, proc = ctx.rng.choice(sorted(found, key=lambda gp: gp[0]))
    return Shot(_signal(proc, signal.SIGKILL, f"SIGKILL group {group}'s launcher (pid {proc.pid})"))


def corrupt_newest(ctx: FaultContext) -> Shot:
    """SIGKILL of the launcher(s), then one byte of the newest checkpoint's largest file flipped."""
    _kill_frozen(ctx, ctx.launchers)
    # what outlives its launcher here is a leftover (ranks without a death signal train on),
    # not something to clear away before the corruption
    left = ctx.wait_gone()
    from distrain.checkpoint.files import step_dirs

    dirs = step_dirs(str(ctx.job.ckpt)) if ctx.job.ckpt else []
    if not dirs:
        return Shot("SIGKILL the launcher (no checkpoint yet to corrupt)", rerun=True, left=left)
    step, newest = dirs[0]
    files = sorted(Path(newest).iterdir(), key=lambda f: f.stat().st_size)
    victim = files[-1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    return Shot(f"SIGKILL the launcher, corrupt step {step}'s {victim.name}", rerun=True, left=left)


def disk_full(ctx: FaultContext) -> Shot:
    """The checkpoint filesystem (a small tmpfs) filled by another writer; freed before a rerun."""
    return fill(ctx.job.ckpt, "the checkpoint folder", "fill the checkpoint filesystem")


def fill(folder: Path | None, name: str, what: str) -> Shot:
    """`folder`'s own filesystem (a small tmpfs) filled by another writer; freed before a rerun."""
    if folder is None or not os.path.ismount(folder):
        raise Missed(f"{name} is not on its own filesystem")
    filler = folder / ".filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
    return Shot(what, rerun=True, after=lambda: filler.unlink(missing_ok=True))


def double_kill(ctx: FaultContext) -> Shot:
    """Two SIGKILLs of ranks within a second."""
    first = kill_rank(ctx)
    time.sleep(ctx.rng.uniform(0.0, 1.0))
    try:
        second = kill_rank(ctx)
    except Missed:  # one kill is kill_rank's trial, not this one's: aim again
        raise Missed(f"the second kill found no rank ({first.what})") from None
    return Shot(f"{first.what}; then {second.what}")


def kill_launcher_in_save(ctx: FaultContext) -> Shot:
    """SIGKILL of the launcher while the script's own torch.save writes (fault_save.py)."""
    import fault_save

    return fault_save.kill_launcher_in_save(ctx)


def _quiet(fn: Callable[..., object], *args: object) -> bool:
    try:
        fn(*args)
    except (psutil.Error, OSError):
        return False
    return True


def threading_timer(seconds: float, fn: Callable[[], None]) -> None:
    """Run `fn` once after `seconds` in a daemon thread."""
    import threading

    timer = threading.Timer(seconds, fn)
    timer.daemon = True
    timer.start()


@dataclass
class FaultContext:
    """What a fault may touch: the trial's id, its launcher, its job and the trial's draws."""

    trial: str
    launcher: psutil.Process
    job: Job
    rng: random.Random
    watchdog: float
    #: wait until the trial's processes are gone; those still alive then, killed and named
    wait_gone: Callable[[], list[str]]
    #: every node's launcher (one on single-node kinds) and the namespaces of a two-node kind
    launchers: list[psutil.Process] = field(default_factory=list)
    hosts: Hosts | None = None
    #: the nodes the fault took away (an elastic job may finish without them)
    lost: set[int] = field(default_factory=set)
    logs: Path | None = None  # the first run's log files (without suffix)


CHECKPOINTED = ("digits", "imagefolder", "fsdp", "ddp_small", "memory", "nodes_static",
                "nodes_elastic")  # kinds with distrain's checkpoints on disk  # fmt: skip
#: fault name -> (function, which kinds it applies to); memory_faults.py adds the memory tier's
FAULTS: dict[str, tuple[Callable[[FaultContext], Shot], Callable[[Kind], bool]]] = {
    "kill_rank": (kill_rank, lambda k: True),
    "kill_loader_worker": (kill_loader_worker, lambda k: k.loader_workers),
    "kill_launcher": (kill_launcher, lambda k: k.nodes == 1),
    "kill_launcher_in_save": (kill_launcher_in_save, lambda k: k.name == "rehearsal"),
    "kill_node_launcher": (kill_node_launcher, lambda k: k.nodes > 1),
    "kill_any_process": (kill_any_process, lambda k: True),
    "sigterm_launcher": (sigterm_launcher, lambda k: True),
    "stop_rank": (stop_rank, lambda k: not k.replicas),
    "stop_rank_resumed": (stop_rank_resumed, lambda k: not k.replicas),
    "kill_lighthouse": (kill_lighthouse, lambda k: k.replicas),
    "kill_lighthouse_in_heal": (kill_lighthouse_in_heal, lambda k: k.replicas),
    "kill_group_launcher": (kill_group_launcher, lambda k: k.replicas and k.nodes == 1),
    "corrupt_newest": (corrupt_newest, lambda k: k.name in CHECKPOINTED),
    "disk_full": (disk_full, lambda k: k.name in ("digits", "fsdp", "ddp_small", "nodes_static")),
    "double_kill": (double_kill, lambda k: True),
    "link_down": (link_down, lambda k: k.nodes > 1),
    "link_tbf": (link_tbf, lambda k: k.nodes > 1),
}

#: the faults under which the job runs with `--watchdog`
WATCHED = ("stop_rank", "stop_rank_resumed")
FAULTS.update(__import__("memory_faults").MEMORY_FAULTS)  # they use this module's helpers
