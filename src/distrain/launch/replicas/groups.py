"""`distrain run --replicas R -n N`: R fault-tolerant replica groups of N processes (TorchFT).

The launcher starts TorchFT's lighthouse (launch/replicas/lighthouse.py), then one ordinary
`distrain run -n N` per group, each a child process with its own elastic agent, store, free port and
restart budget (``--max-restarts``, 3 by default here).  The workers learn their group from the
environment (:mod:`distrain.contract`: DISTRAIN_REPLICA_GROUP, …) and train through
``torchft.Manager`` (worker/replicas/training.py): when a process of one group dies only that
group's agent restarts it, the other groups go on, and the replacement heals from a live group.
Across nodes (``--nnodes M``) each node's launcher runs R/M of the groups and node 0 the lighthouse
(launch/replicas/nodes.py).  The events become lines in launch/replicas/events.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from distrain.contract import (
    FT_EVENTS,
    FT_HOST,
    LIGHTHOUSE,
    NUM_THREADS,
    REFUSED_EXIT_CODE,
    REPLICA_GROUP,
    REPLICA_GROUPS,
    signal_exit_code,
)
from distrain.errors import UsageError
from distrain.launch.command_line import CommandLine, script_tail
from distrain.launch.plan import LaunchPlan
from distrain.launch.replicas.events import ReplicaJob, launcher_died
from distrain.launch.replicas.lighthouse import Lighthouse, RemoteLighthouse, lighthouse_program
from distrain.launch.replicas.nodes import Placement, RollCall, node_address, place
from distrain.net import reserve_port
from distrain.process.cores import usable_cores
from distrain.process.lineage import die_with_parent

PROG = "distrain run"
#: restarts each group's agent allows when --max-restarts is not given
DEFAULT_GROUP_RESTARTS = 3
#: options (dests) of a job across nodes: each group is a one-node job of its own
_NODE_OPTIONS = (
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "local_addr",
    "iface",
)


def check_replicas(args: argparse.Namespace, gpus_visible: int) -> Placement:
    """Where the groups `args` asks for run; UsageError (one line) for what cannot run."""
    try:
        groups = int(str(args.replicas))
    except ValueError:
        raise UsageError(
            f"--replicas expects a number of replica groups (got {args.replicas!r})"
        ) from None
    if groups < 1:
        raise UsageError(f"--replicas must be at least 1 (got {groups})")
    if REPLICA_GROUP in os.environ:  # never a job of groups inside a group
        raise UsageError(
            f"--replicas inside replica group {os.environ[REPLICA_GROUP]} of another job"
        )
    if args.launcher != "torchrun":
        raise UsageError(
            "--replicas runs each group under torch's elastic agent; it cannot be combined with "
            f"--launcher {args.launcher}"
        )
    placement = place(args, groups)
    if args.gpus is not None:
        raise UsageError(
            "--replicas gives each group its own GPUs; set CUDA_VISIBLE_DEVICES instead of --gpus"
        )
    nproc, here = int(args.nproc_per_node), len(placement.local)
    if gpus_visible and not args.cpu and here * nproc > gpus_visible:
        where = "" if here == groups else f" on this node ({here} of {groups} groups)"
        raise UsageError(
            f"--replicas {groups} × -n {nproc} needs {here * nproc} GPUs{where}, "
            f"{gpus_visible} visible "
            "(fewer groups or processes, or --cpu)"
        )
    return placement


def group_argv(command: CommandLine, group: int) -> list[str]:
    """`distrain run` arguments for one group: no --replicas, a restart budget, its own run dir.

    Options of a multi-node job are dropped too: a group is a job on one node.
    """
    out: list[str] = []
    for opt in command.options:
        if opt.dest == "replicas" or opt.dest in _NODE_OPTIONS:
            continue
        if (
            opt.dest == "run_dir" and opt.value is not None
        ):  # ranks of two groups must not share files
            out += [opt.name, os.path.join(opt.value, f"group{group}")]
            continue
        out += opt.tokens
    if not command.has("max_restarts"):
        out += ["--max-restarts", str(DEFAULT_GROUP_RESTARTS)]
    return out + script_tail(list(command.script_argv))


def _group_env(
    job: ReplicaJob,
    lighthouse_address: str,
    group: int,
    placement: Placement,
    gpus: list[str],
    iface: str | None = None,
    host: str | None = None,
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            REPLICA_GROUP: str(group),
            REPLICA_GROUPS: str(job.groups),
            FT_EVENTS: job.folder,
            LIGHTHOUSE: lighthouse_address,
        }
    )
    # TorchFT's own examples read these two; scripts written for them keep working
    env.update({"REPLICA_GROUP_ID": str(group), "NUM_REPLICA_GROUPS": str(job.groups)})
    env.setdefault("RUST_LOG", "warn")  # TorchFT's manager logs every connection at info level
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if NUM_THREADS not in os.environ and not (omp.isdigit() and int(omp) > 1):
        # every group's processes share this node's cores; each group's own launcher and its
        # workers would count only the group's (OMP_NUM_THREADS=1 means "not chosen" there,
        # process/cores.py): 2 groups of 1 on 2 cores ran 2 threads each, oversubscribed
        per_process = str(max(1, usable_cores() // (len(placement.local) * placement.per_group)))
        env[NUM_THREADS] = env["OMP_NUM_THREADS"] = per_process
    if host is not None:  # across nodes: the other groups reach this one's manager and store here
        env[FT_HOST] = host
        if iface:  # and gloo's cross-group connections leave by that interface, not loopback
            env.setdefault("GLOO_SOCKET_IFNAME", iface)
            env.setdefault("NCCL_SOCKET_IFNAME", iface)
    if gpus:  # each group its own slice of the visible GPUs
        k, n = placement.local.index(group), placement.per_group
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[k * n : (k + 1) * n])
    return env


def _visible_gpus(count: int) -> list[str]:
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def _print_the_commands(placement: Placement, given: CommandLine, host: str | None) -> None:
    """--dry-run: the lighthouse's command, then each local group's `distrain run` line."""
    groups = placement.groups
    where = (
        f"{placement.master_addr}:{placement.port}" if placement.multi_node else "127.0.0.1:PORT"
    )
    print(
        f"torchft_lighthouse --min_replicas 1 --bind {where}  # on node 0; {groups} groups, "
        "then per group here:"
    )
    for g in placement.local:
        print(
            f"{REPLICA_GROUP}={g} {REPLICA_GROUPS}={groups} distrain run "
            f"{shlex.join(_argv_of(g, given, host, 'PORT'))}"
        )


def _lighthouse(placement: Placement) -> Lighthouse | RemoteLighthouse:
    """Node 0 starts TorchFT's lighthouse; the other nodes reach node 0's."""
    if placement.node == 0:
        bind = (
            (placement.master_addr, placement.port) if placement.multi_node else ("127.0.0.1", None)
        )
        return Lighthouse(lighthouse_program(), *bind)
    return RemoteLighthouse(placement.master_addr, placement.port)


def run(launch: LaunchPlan, gpus_visible: int) -> int:
    """Run this node's replica groups to the end; returns the job's exit code."""
    args, given = launch.args, launch.command
    placement = check_replicas(args, gpus_visible)
    groups, per_group = placement.groups, placement.per_group
    gpus = _visible_gpus(gpus_visible) if gpus_visible and not args.cpu else []
    command = [
        sys.executable,
        "-c",
        # through the entry point's catcher: the groups' fork servers leave the launcher's stack
        "import sys; from distrain.cli import run_subcommand as run; "
        "sys.exit(run('distrain.launch.cli', sys.argv[1:]))",
    ]
    host, iface = node_address(placement, args.iface) if placement.multi_node else (None, None)
    if args.dry_run:
        _print_the_commands(placement, given, host)
        return 0
    # the groups run in sessions of their own (so a stop can kill each whole group): a SIGTERM to
    # this launcher must pass through the `finally` below that stops them, not end it on the spot
    signal.signal(signal.SIGTERM, _exit_on_signal)
    roll = RollCall(placement) if placement.multi_node else None
    lighthouse = _lighthouse(placement)
    job = ReplicaJob(
        groups, tempfile.mkdtemp(prefix="distrain-ft-"), local=placement.local, run_dir=args.run_dir
    )
    on = (
        f" (groups {placement.local[0]}–{placement.local[-1]} on node "
        f"{placement.node}/{placement.nodes})"
        if placement.multi_node
        else ""
    )
    job.say(
        f"{groups} replica groups × {per_group} process(es){on}; TorchFT lighthouse on "
        f"{lighthouse.host}:{lighthouse.port}"
    )

    held: dict[int, socket.socket] = {}  # each group's store port, kept ours until it binds

    def start(g: int) -> subprocess.Popen[bytes]:
        port: int | str = ""
        if host is not None:
            if g in held:
                held.pop(g).close()  # the group's previous store went with its processes
            held[g] = reserve_port(host)
            port = int(held[g].getsockname()[1])
        return subprocess.Popen(
            [*command, *_argv_of(g, given, host, port)],
            env=_group_env(job, lighthouse.address, g, placement, gpus, iface, host),
            start_new_session=True,
            preexec_fn=die_with_parent,  # a SIGKILLed launcher takes its groups along
        )

    budget = int(given.value("max_restarts") or DEFAULT_GROUP_RESTARTS)
    try:
        job.procs.extend(start(g) for g in placement.local)
        code = _watch(job, lighthouse, roll, GroupRestarts(start, budget))
        if code == 0:  # every group ended well: and with the same state?
            code = job.check_finals()
        if roll is not None:
            roll.share_ends(job.folder, job.local)  # the last group's end, for the other nodes
            roll.finished()
            if placement.node == 0:  # the other nodes' groups still need the lighthouse
                roll.wait_for_others(job.say)
        return code
    except KeyboardInterrupt:
        job.stop_all()
        return 130
    finally:
        if roll is not None:  # stopped: the other nodes' groups wait for this node's no more
            # said before the groups are stopped: that may outlast the grace of whoever stops
            # this launcher (a --hosts watcher SIGKILLs it after 10 s)
            with contextlib.suppress(Exception):  # node 0 may be gone: then nobody waits
                roll.leave(job.folder, job.local)
        job.stop_all()
        lighthouse.stop()
        for sock in held.values():
            sock.close()
        shutil.rmtree(job.folder, ignore_errors=True)


def _argv_of(group: int, command: CommandLine, host: str | None, port: int | str) -> list[str]:
    argv = group_argv(command, group)
    if host is None:
        return argv
    # across nodes the group's store must be reachable by the other groups (TorchFT's cross-group
    # group forms on it): a static store on this node's address instead of loopback
    return ["--master-addr", host, "--master-port", str(port), *argv]


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@dataclass
class GroupRestarts:
    """Restarts of the groups' own launchers: `start(group)` starts one again, `budget` times at
    most per group (--max-restarts, as for its workers)."""

    start: Callable[[int], subprocess.Popen[bytes]]
    budget: int
    done: dict[int, int] = field(default_factory=dict)

    def after_death(self, job: ReplicaJob, group: int, code: int) -> bool:
        """A group's launcher died: restart it (True), or end the group for good (False)."""
        k = job.local.index(group)
        dead = job.procs[k]
        # its workers die with it (die_with_parent); what is left of its session goes now, so
        # no old worker still answers for the group when the new one joins the quorum
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(dead.pid, signal.SIGKILL)
        self.done[group] = self.done.get(group, 0) + 1
        if not job.on_launcher_death(group, dead.pid, code, self.done[group], self.budget):
            return False
        job.procs[k] = self.start(group)
        return True


def _watch(
    job: ReplicaJob,
    lighthouse: Lighthouse | RemoteLighthouse,
    roll: RollCall | None = None,
    restarts: GroupRestarts | None = None,
) -> int:
    """Report events until this node's groups have ended; stop them if the lighthouse dies."""
    while len(job.finished) < len(job.local):
        time.sleep(0.1)
        if roll is not None:
            roll.beat()
            roll.share_starts(job.folder, job.local)
            roll.share_ends(job.folder, job.local)
            roll.share_dones(job.folder, job.local)
            roll.mark_silent(job.folder)
        job.read_events()
        if job.refused is not None:  # a script the groups cannot replicate: restarts would too
            job.kill_all()
            return REFUSED_EXIT_CODE
        for g, proc in list(zip(job.local, job.procs, strict=True)):  # a restart replaces one
            code = proc.poll()
            if code is not None and g not in job.finished:
                job.read_events()
                if restarts is not None and launcher_died(code):
                    restarts.after_death(job, g, code)
                else:
                    job.on_exit(g, code)
        how = lighthouse.died()
        if how is not None and len(job.finished) < len(job.local):
            # workers block in the quorum and never reach a step end to save at: no use waiting long
            job.stop_all(grace_s=3)
            # said once the groups' launchers have said their own ends: the job's last line
            # names the cause (the chaos campaign saw "stopped by SIGTERM" after it)
            job.say(
                f"error: the TorchFT lighthouse {lighthouse.who()} ended ({how}); the groups "
                "cannot agree on steps without it, the job stopped"
            )
            return 1
    job.read_events()
    failed = [code for code in job.finished.values() if code != 0]
    if not failed:
        return 0
    code = failed[0]
    return signal_exit_code(-code) if code < 0 else code
