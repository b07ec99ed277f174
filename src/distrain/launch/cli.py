"""`distrain run`: torchrun's elastic agent with the sharp edges removed.

The launch itself is torch's: the arguments are parsed by ``torch.distributed.run``'s own
parser and handed to ``torch.distributed.run.run``.  distrain adds:

- script arguments are split off *before* parsing, so ``train.py --n 5`` or ``--log x`` never
  trips torchrun's "ambiguous option" prefix matching, and no launcher flag is abbreviated;
- ``-n/--nproc N|auto``, ``--gpus 0,3``, ``--legacy-local-rank``, ``--dry-run``;
- on one node a free port is always used (c10d rendezvous on port 0) unless one is named, and a
  named port that is busy is a one-line error instead of an ``Address already in use`` trace;
- ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: workers get their own store instead of sharing the
  agent's, which makes restarts and late-joining nodes reliable (pytorch#135712);
- ``OMP_NUM_THREADS`` = usable cores / processes per node instead of torchrun's fixed 1;
- the exit code is the failed worker's own (128+N for a signal), with a one-line summary;
- at the end, where a step's time went, a straggler and one piece of advice (launch/job_summary.py);
- ``--start-method fast`` (default): workers are forked from a server that imported torch while the
  launcher was starting, instead of each paying for ``import torch`` (see
  launch/fast_start/forkserver.py).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Sequence

from distrain.contract import (
    BIND_ADDR,
    CPU_REHEARSAL,
    HOST_GO_FD,
    LAUNCHER_PID,
    REPLICA_GROUP,
    WATCHDOG_EXIT_CODE,
    signal_exit_code,
)
from distrain.errors import UsageError, fail
from distrain.launch import (
    console,
    job_summary,
    local_rank_hint,
    rendezvous,
    stop_watch,
    store_hold,
    usage,
    watch_notice,
)
from distrain.launch.command_line import HOST_LIST, split, split_without_torch
from distrain.launch.fast_start import forkserver
from distrain.launch.mpi import run_with_launcher
from distrain.launch.plan import PROG, LaunchPlan, _visible_gpu_count, plan


def _exit_code_of(err: BaseException, job_dir: str | None = None) -> tuple[int, str]:
    failures = getattr(err, "failures", {}) or {}
    if not failures:
        return 1, str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    # a rank that wrote an error file raised the root cause; the others only lost their peer,
    # and the launcher's own SIGTERM of the survivors is never the cause
    causes = {r: f for r, f in failures.items() if int(f.exitcode) != -signal.SIGTERM} or failures
    rank, first = min(
        causes.items(), key=lambda kv: (not os.path.isfile(kv[1].error_file), kv[1].timestamp)
    )
    code = int(first.exitcode)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return signal_exit_code(-code), f"rank {rank} (pid {first.pid}) was killed by {name}"
    if code == WATCHDOG_EXIT_CODE:
        return (
            code,
            f"stopped by the watchdog (rank {rank} exited with {code}; see 'distrain "
            "watchdog:' above)",
        )
    if not os.path.isfile(first.error_file):
        # a peer failed first (it lost this rank's connection) and the agent stopped the rank
        # that raised while that one was still exiting: its cause is a "failure" event
        stopped = job_summary.cause(job_dir)
        if stopped is not None:
            return code or 1, stopped
    message = first.message.get("message", "") if isinstance(first.message, dict) else first.message
    cause = f": {message}" if os.path.isfile(first.error_file) and message else ""
    return code or 1, f"rank {rank} (pid {first.pid}) exited with code {code}{cause}"


def _print_network(launch: LaunchPlan) -> None:
    choice = launch.network
    assert choice is not None
    a = launch.args
    static = a.rdzv_backend == "static" and not a.rdzv_endpoint
    node = f"node {a.node_rank}/{a.nnodes}" if static else f"elastic node ({a.nnodes} nodes)"
    for warning in choice.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
    print(choice.summary(node), file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> int:
    """Entry point of `distrain run`; returns the job's exit code."""
    # a usage error, and the fan-out (which starts nothing here but ssh), need no `import torch`
    # (seconds under load): the recorded torchrun table reads the command line first
    # (not on a host of the fan-out: its address and port are tokens until its go, checked then)
    quick = None if HOST_GO_FD in os.environ else split_without_torch(argv)
    if quick is not None:
        try:
            usage.check_before_torch(quick)
        except UsageError as err:
            fail(PROG, str(err), err.exit_code)
        if quick.has(*HOST_LIST):
            from distrain.launch.hosts import run as hosts_run

            return hosts_run.main(quick)
    go_fd = None
    if HOST_GO_FD in os.environ:  # started by `distrain run --hosts` before its verdict
        from distrain.launch.hosts import go as host_go

        go_fd = host_go.take_fd()
    command = split(argv)  # the one reading of the command line: every path below takes it
    if command.has(*HOST_LIST):  # many machines from this one: ssh fan-out
        from distrain.launch.hosts import run as hosts_run

        return hosts_run.main(command)
    started = forkserver.early_start(command)  # its `import torch` overlaps ours
    if go_fd is not None:  # torch is imported: now the master's address, or a stop
        go = host_go.read_go(go_fd)
        if go is None:
            if started:
                forkserver.stop_server()
            return host_go.NOT_STARTED
        command = host_go.fill(command, go)
    try:
        launch = plan(command)
        if launch.args.replicas is not None:  # each group's own launcher forks
            from distrain.launch.replicas import groups as ft

            return ft.run(launch, _visible_gpu_count())
    except UsageError as err:
        if started:
            forkserver.stop_server()
        fail(PROG, str(err), err.exit_code)
    if launch.network is not None:
        _print_network(launch)
    if launch.args.dry_run and launch.args.launcher != "torchrun":
        from distrain.launch.mpi import command_for

        try:
            print(shlex.join(command_for(launch.args, launch.env)))
        except UsageError as err:
            fail(PROG, str(err), err.exit_code)
        return 0
    if launch.args.dry_run:
        env_line = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(launch.env.items()))
        print(env_line + (" " if env_line else "") + shlex.join(launch.torchrun_command()))
        return 0
    env = dict(launch.env)  # the plan's, and the job's folder its processes report to
    for line in (launch.rehearsal_line, launch.selfstart_line):
        if line:  # one write: under --replicas every group's launcher says it at the same moment
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    folder = job_summary.start(env)  # the job's event stream (distrain/events/)
    notice = watch_notice.start(launch, folder)  # --watchdog on a script without init()
    os.environ.update(env)
    try:
        return _launch(launch, env, folder, notice)
    finally:  # idle now; don't leave it holding our stdout (it may still be preloading)
        forkserver.stop_server()
        _end_lines(folder, notice)  # printed already when the job failed (_launch)


def _end_lines(folder: str | None, notice: watch_notice.WatchNotice | None) -> None:
    """The end-of-job lines from the job's event stream (once: the last call removes the
    folder), all before a failure's verdict: what ``--cpu`` mapped (seen after the verdict,
    as the job's last line, in the chaos campaign), the watchdog notice, then the step
    breakdown.  The fast start's fallback is said when it happens (worker/fast_start/forked.py)."""
    if CPU_REHEARSAL in os.environ:  # --cpu set it for its workers (launch/rehearse/environment.py)
        from distrain.launch.rehearse import environment as rehearsal

        rehearsal.finish(folder)
    if notice is not None:
        notice.finish()  # reads the stream in the folder job_summary.finish removes
    job_summary.finish(folder)


def _launch(
    launch: LaunchPlan,
    env: dict[str, str],
    job_dir: str | None = None,
    notice: watch_notice.WatchNotice | None = None,
) -> int:
    """Run the job; a failure's verdict is the last line, after the breakdown lines (if any)."""
    if launch.args.launcher != "torchrun":
        try:
            return run_with_launcher(launch.args, env)
        except UsageError as err:
            fail(PROG, str(err), err.exit_code)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from distrain.launch.agent_store import AgentStore

    spec, rdzv = launch.agent_store, launch.rendezvous
    agent_store: AgentStore | None = None
    if spec is not None:
        try:
            # one node: the agent's store and rank 0's listen on loopback, not on every interface
            agent_store = AgentStore(spec.host, spec.port)
        except UsageError as err:
            fail(PROG, str(err), err.exit_code)
        os.environ.setdefault(BIND_ADDR, agent_store.address)
        rdzv = rdzv.on_port(agent_store.port)  # a free port is known once the store listens
    # torch's known noise off the console, one line of ours per restart (launch/console.py)
    console.install(job_dir, rdzv.max_nodes > 1)
    if os.environ.get(REPLICA_GROUP) is not None:  # one group of `--replicas`
        from distrain.launch.replicas.events import report_losses_from_agent

        report_losses_from_agent()  # its dead workers reach the launcher above
    rendezvous.pass_endpoint(rdzv)
    os.environ[LAUNCHER_PID] = str(
        os.getpid()
    )  # a static job's rank may stop this node (worker/lifecycle/stop_job.py)
    # a static multi-node job: a rank on any node may stop every node (launch/stop_watch.py)
    watch = stop_watch.start(rdzv, job_dir)
    hold = store_hold.start(rdzv)  # a multi-node c10d job's store host: the others close through it
    succeeded = False
    try:
        forkserver.run(launch.agent_args(rdzv), launch.start)
        succeeded = True
    except ChildFailedError as err:
        code, summary = _exit_code_of(err, job_dir)
        resume = console.resume_hint(job_dir)  # read before _end_lines removes the folder
        _end_lines(job_dir, notice)
        tip = local_rank_hint.hint(launch.args, PROG)
        if tip:  # before the last line: that one keeps the cause
            print(tip, file=sys.stderr, flush=True)
        print(f"{PROG}: job failed: {summary}{resume}", file=sys.stderr, flush=True)
        return code
    except SignalException as err:  # the agent passed the signal on and waited for the workers
        name = signal.Signals(err.sigval).name
        # why the job stopped for good: this node's watch saw it, or a rank of the node said it
        stopped = (watch.reason if watch is not None else None) or job_summary.stop_reason(job_dir)
        resume = console.resume_hint(job_dir, every_node=stopped is not None)
        _end_lines(job_dir, notice)
        if stopped:  # no checkpoint mark on this node: the rerun still resumes from the newest
            resume = (
                resume
                or "; rerun the same command on every node to resume from the newest checkpoint"
            )
            print(f"{PROG}: job stopped: {stopped}{resume}", file=sys.stderr, flush=True)
            return 1
        print(
            f"{PROG}: stopped by {name} (the workers were given it and have exited){resume}",
            file=sys.stderr,
            flush=True,
        )
        return signal_exit_code(err.sigval)
    except KeyboardInterrupt:
        return 130
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    except Exception as err:  # rendezvous/store errors: one line, not torch's trace
        if type(err).__name__ == "RendezvousClosedError":  # a rank's error would recur on restart
            _end_lines(job_dir, notice)
            reason = rendezvous.stop_reason(rdzv) or "see the ranks' logs"
            why = "not restarted (a restart would fail the same way)"
            print(f"{PROG}: job failed, {why}: {reason}", file=sys.stderr, flush=True)
            rendezvous.wait_until_read(rdzv)
            return 1
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        _end_lines(job_dir, notice)  # before the verdict: the last line names the cause (chaos)
        print(f"{PROG}: error: {type(err).__name__}: {first}", file=sys.stderr, flush=True)
        return 1
    finally:
        if watch is not None:  # node 0: after the last line, until the other nodes read why
            watch.finish()
        if hold is not None:
            hold.finish(succeeded)
        if agent_store is not None:
            agent_store.close()
    return 0
