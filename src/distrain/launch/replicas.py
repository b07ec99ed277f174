"""`distrain run --replicas R -n N`: R fault-tolerant replica groups of N processes (TorchFT).

The launcher starts TorchFT's lighthouse (launch/lighthouse.py), then one ordinary
`distrain run -n N` per group, each a child process with its own elastic agent, store, free
port and restart budget (``--max-restarts``, 3 by default here).  The workers learn their group
from the environment (:mod:`distrain.contract`: DISTRAIN_REPLICA_GROUP, …) and train through
``torchft.Manager`` (train/replicas.py): when a process of one group dies only that group's
agent restarts it, the other groups go on, and the replacement heals from a live group.

Workers and agents leave events in a folder (DISTRAIN_FT_EVENTS): each group's last committed
step, "lost" (a group's agent saw a worker die) and "joined" (a worker passed its first quorum,
healed from a peer or not).  This process turns them into one line each on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..contract import (
    FT_EVENTS,
    FT_EVENTS_FILE,
    LIGHTHOUSE,
    NUM_THREADS,
    REPLICA_EVENTS_FILE,
    REPLICA_GROUP,
    REPLICA_GROUPS,
    append_ft_event,
    ft_step_file,
    signal_exit_code,
    usable_cores,
)
from ..errors import UsageError
from .lighthouse import Lighthouse, lighthouse_program

PROG = "distrain run"
#: restarts each group's agent allows when --max-restarts is not given
DEFAULT_GROUP_RESTARTS = 3
_REPLICA_FLAGS = ("--replicas",)
_RESTART_FLAGS = ("--max-restarts", "--max_restarts")
_RUN_DIR_FLAGS = ("--run-dir", "--run_dir")


def check_replicas(args: argparse.Namespace, gpus_visible: int) -> int:
    """The number of groups `args` asks for; UsageError (one line) for what cannot run."""
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
            f"--replicas runs each group under torch's elastic agent; it cannot be combined with --launcher {args.launcher}"
        )
    if str(args.nnodes) not in ("1", "1:1"):
        raise UsageError(
            f"--replicas runs its {groups} groups on one node for now; --nnodes {args.nnodes} is not supported with it"
        )
    if args.gpus is not None:
        raise UsageError(
            "--replicas gives each group its own GPUs; set CUDA_VISIBLE_DEVICES instead of --gpus"
        )
    nproc = int(args.nproc_per_node)
    if gpus_visible and not args.cpu and groups * nproc > gpus_visible:
        raise UsageError(
            f"--replicas {groups} × -n {nproc} needs {groups * nproc} GPUs, {gpus_visible} visible "
            "(fewer groups or processes, or --cpu)"
        )
    return groups


def group_argv(
    launcher_argv: list[str], rest: list[str], group: int, takes_value: Mapping[str, bool]
) -> list[str]:
    """`distrain run` arguments for one group: no --replicas, a restart budget, its own run dir.

    `takes_value` says which options take a value (plan.option_table): a switch such as
    ``--cpu`` before ``--replicas`` must not swallow it (the groups would each start replicas).
    """
    out: list[str] = []
    restarts = False
    i = 0
    while i < len(launcher_argv):
        tok = launcher_argv[i]
        name = tok.split("=", 1)[0]
        span = 2 if takes_value.get(name, False) and "=" not in tok else 1
        value = (
            tok.split("=", 1)[1]
            if "=" in tok
            else (launcher_argv[i + 1] if span == 2 and i + 1 < len(launcher_argv) else None)
        )
        if name in _REPLICA_FLAGS:
            i += span
            continue
        if name in _RUN_DIR_FLAGS and value is not None:  # ranks of two groups must not share files
            out += [name, os.path.join(value, f"group{group}")]
            i += span
            continue
        restarts = restarts or name in _RESTART_FLAGS
        out += launcher_argv[i : i + span]
        i += span
    if not restarts:
        out += ["--max-restarts", str(DEFAULT_GROUP_RESTARTS)]
    return out + ["--", *rest] if rest and rest[0].startswith("-") else out + rest


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class AgentLossReporter(logging.Filter):
    """In a group's `distrain run`: turn the agent's "failed (exitcode …)" record into a "lost" event."""

    def __init__(self, folder: str, group: int) -> None:
        super().__init__()
        self.folder, self.group = folder, group

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            str(record.msg).startswith("failed (exitcode")
            and isinstance(record.args, tuple)
            and len(record.args) >= 3
        ):
            code, local_rank, pid = record.args[:3]
            try:
                append_ft_event(
                    self.folder,
                    event="lost",
                    group=self.group,
                    rank=int(local_rank),
                    pid=int(pid),
                    exitcode=int(code),
                )
            except (OSError, ValueError, TypeError):
                pass  # a report, never a reason to disturb the agent
        return True


def report_losses_from_agent() -> None:
    """Under --replicas (the environment says so), report each dead worker of this group's agent."""
    folder, group = os.environ.get(FT_EVENTS), os.environ.get(REPLICA_GROUP)
    if folder and group is not None and group.isdigit():
        logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
            AgentLossReporter(folder, int(group))
        )


@dataclass
class _Job:
    """What the launcher knows of the groups while they run."""

    groups: int
    folder: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    lost: set[int] = field(default_factory=set)
    finished: dict[int, int] = field(default_factory=dict)
    offset: int = 0  # bytes of the events file already read
    run_dir: str | None = None  # --run-dir: events also go to run_dir/replicas.jsonl (distrain top)

    def say(self, text: str, event: str | None = None, **fields: object) -> None:
        """One line on stderr; with an `event` name also one JSON line in the run directory."""
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)
        if event and self.run_dir:
            record = {"t": round(time.time(), 3), "event": event, **fields, "text": text}
            with contextlib.suppress(OSError):  # a full or vanished disk must not stop the job
                os.makedirs(self.run_dir, exist_ok=True)
                with open(os.path.join(self.run_dir, REPLICA_EVENTS_FILE), "a") as f:
                    f.write(json.dumps(record) + "\n")

    def step_of(self, group: int) -> str:
        try:
            with open(ft_step_file(self.folder, group)) as f:
                return f.read().strip() or "0"
        except OSError:
            return "0"

    def continuing(self) -> int:
        return sum(1 for g in range(self.groups) if g not in self.lost and g not in self.finished)

    def read_events(self) -> None:
        path = os.path.join(self.folder, FT_EVENTS_FILE)
        try:
            with open(path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.splitlines():
            try:
                self.on_event(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue

    def on_event(self, ev: dict[str, object]) -> None:
        group = int(str(ev["group"]))
        if ev["event"] == "lost":
            code = int(str(ev["exitcode"]))
            how = _signal_name(code) if code < 0 else f"exit code {code}"
            self.lost.add(group)
            step = self.step_of(group)
            self.say(
                f"replica group {group} lost at step {step} (rank {ev['rank']}, pid {ev['pid']}, {how}); "
                f"{self.continuing()}/{self.groups} groups continue",
                "lost", group=group, step=int(step) if step.isdigit() else step, rank=ev["rank"], how=how,
            )  # fmt: skip
        elif ev["event"] == "joined" and int(str(ev.get("rank", 0))) == 0:
            src, step = ev.get("source"), int(str(ev.get("step", 0)))
            if src is not None and (step > 0 or group in self.lost):
                seconds = float(str(ev["seconds"]))
                self.say(
                    f"replica group {group} healed from group {src} at step {step} in {seconds:.1f} s",
                    "healed", group=group, source=src, step=step, seconds=seconds,
                )  # fmt: skip
            elif group in self.lost:
                self.say(
                    f"replica group {group} rejoined at step {step} from its own state (no live group was ahead)",
                    "rejoined", group=group, step=step,
                )  # fmt: skip
            self.lost.discard(group)

    def on_exit(self, group: int, code: int) -> None:
        self.finished[group] = code
        if code != 0:
            how = f"killed by {_signal_name(code)}" if code < 0 else f"exit code {code}"
            self.say(
                f"replica group {group} failed ({how}); {self.continuing()}/{self.groups} groups continue",
                "failed", group=group, how=how,
            )  # fmt: skip

    def stop_all(self, grace_s: float = 30) -> None:
        """SIGTERM every group's launcher (its agent passes it on), SIGKILL what is left after `grace_s`."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the agent passes it on and waits for its workers
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):  # the group's agent and workers too
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _group_env(
    job: _Job, lighthouse: Lighthouse, group: int, per_group: int, gpus: list[str]
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            REPLICA_GROUP: str(group),
            REPLICA_GROUPS: str(job.groups),
            FT_EVENTS: job.folder,
            LIGHTHOUSE: lighthouse.address,
        }
    )
    # TorchFT's own examples read these two; scripts written for them keep working
    env.update({"REPLICA_GROUP_ID": str(group), "NUM_REPLICA_GROUPS": str(job.groups)})
    env.setdefault("RUST_LOG", "warn")  # TorchFT's manager logs every connection at info level
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if NUM_THREADS not in os.environ and not (omp.isdigit() and int(omp) > 1):
        # every group's processes share this node's cores; each group's own launcher and its
        # workers would count only the group's (OMP_NUM_THREADS=1 means "not chosen" there,
        # runtime/threads.py): 2 groups of 1 on 2 cores ran 2 threads each, oversubscribed
        per_process = str(max(1, usable_cores() // (job.groups * per_group)))
        env[NUM_THREADS] = env["OMP_NUM_THREADS"] = per_process
    if gpus:  # each group its own slice of the visible GPUs
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[group * per_group : (group + 1) * per_group])
    return env


def _visible_gpus(count: int) -> list[str]:
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def run(
    args: argparse.Namespace,
    launcher_argv: list[str],
    rest: list[str],
    gpus_visible: int,
    takes_value: Mapping[str, bool],
) -> int:
    """Run the replica groups to the end; returns the job's exit code."""
    groups = check_replicas(args, gpus_visible)
    per_group = int(args.nproc_per_node)
    gpus = _visible_gpus(gpus_visible) if gpus_visible and not args.cpu else []
    command = [
        sys.executable,
        "-c",
        "import sys; from distrain.launch.cli import main; sys.exit(main(sys.argv[1:]))",
    ]
    if args.dry_run:
        print(
            f"torchft_lighthouse --min_replicas 1 --bind 127.0.0.1:PORT  # {groups} groups, then per group:"
        )
        for g in range(groups):
            print(
                f"{REPLICA_GROUP}={g} {REPLICA_GROUPS}={groups} distrain run {shlex.join(group_argv(launcher_argv, rest, g, takes_value))}"
            )
        return 0
    # the groups run in sessions of their own (so a stop can kill each whole group): a SIGTERM to
    # this launcher must pass through the `finally` below that stops them, not end it on the spot
    signal.signal(signal.SIGTERM, _exit_on_signal)
    lighthouse = Lighthouse(lighthouse_program())
    job = _Job(groups, tempfile.mkdtemp(prefix="distrain-ft-"), run_dir=args.run_dir)
    job.say(
        f"{groups} replica groups × {per_group} process(es); TorchFT lighthouse on {lighthouse.host}:{lighthouse.port}"
    )
    try:
        for g in range(groups):
            env = _group_env(job, lighthouse, g, per_group, gpus)
            job.procs.append(
                subprocess.Popen(
                    [*command, *group_argv(launcher_argv, rest, g, takes_value)],
                    env=env,
                    start_new_session=True,
                )
            )
        return _watch(job, lighthouse)
    except KeyboardInterrupt:
        job.stop_all()
        return 130
    finally:
        job.stop_all()
        lighthouse.stop()
        shutil.rmtree(job.folder, ignore_errors=True)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _watch(job: _Job, lighthouse: Lighthouse) -> int:
    """Report events until every group has ended; stop the job if the lighthouse dies."""
    while len(job.finished) < job.groups:
        time.sleep(0.1)
        job.read_events()
        for g, proc in enumerate(job.procs):
            code = proc.poll()
            if code is not None and g not in job.finished:
                job.read_events()
                job.on_exit(g, code)
        how = lighthouse.died()
        if how is not None and len(job.finished) < job.groups:
            job.say(
                f"error: the TorchFT lighthouse (pid {lighthouse.proc.pid}) ended ({how}); the groups cannot agree on steps without it, stopping the job"
            )
            # workers block in the quorum and never reach a step end to save at: no use waiting long
            job.stop_all(grace_s=3)
            return 1
    job.read_events()
    failed = [code for code in job.finished.values() if code != 0]
    if not failed:
        return 0
    code = failed[0]
    return signal_exit_code(-code) if code < 0 else code
