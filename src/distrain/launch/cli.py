"""`distrain run`: torchrun's elastic agent with the sharp edges removed.

The launch itself is torch's: the arguments are parsed by ``torch.distributed.run``'s own
parser and handed to ``torch.distributed.run.run``.  distrain adds:

- script arguments are split off *before* parsing, so ``train.py --n 5`` or ``--log x`` never
  trips torchrun's "ambiguous option" prefix matching, and no launcher flag is abbreviated;
- ``-n/--nproc N|auto``, ``--gpus 0,3``, ``--legacy-local-rank``;
- on one node a free port is always used (c10d rendezvous on port 0) unless one is named, and a
  named port that is busy is a one-line error instead of an ``Address already in use`` trace;
- ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: workers get their own store instead of sharing the
  agent's, which makes restarts and late-joining nodes reliable (pytorch#135712);
- ``OMP_NUM_THREADS`` = usable cores / processes per node instead of torchrun's fixed 1;
- the exit code is the failed worker's own (128+N for a signal), with a one-line summary;
- at the end, where a step's time went, a straggler and one piece of advice
  (launch/report/job_summary.py).

The optional features hook in at one seam (launch/seam.py), each from its own folder: the core
reads, checks, plans and runs the agent without naming one.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from distrain.contract import BIND_ADDR, LAUNCHER_PID, WATCHDOG_EXIT_CODE, signal_exit_code
from distrain.errors import UsageError, fail
from distrain.launch import agent
from distrain.launch.command_line import PROG, read_command_line
from distrain.launch.launch_plan import LaunchPlan
from distrain.launch.mpi import run_with_launcher
from distrain.launch.nodes import rendezvous, stop_watch, store_hold
from distrain.launch.options import usage
from distrain.launch.plan import make_plan
from distrain.launch.report import (
    console,
    job_summary,
    local_rank_hint,
    start_lines,
    watch_notice,
)
from distrain.launch.seam import Features


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


def main(argv: Sequence[str]) -> int:
    """Entry point of `distrain run`; returns the job's exit code."""
    features = Features()
    try:
        return _run(argv, features)
    except UsageError as err:  # the one place a usage error is said: after what was started
        features.close()
        fail(PROG, str(err), err.exit_code)
    finally:  # a job that ended before its agent (a host told to stop) leaves nothing running
        features.close()


def _run(argv: Sequence[str], features: Features) -> int:
    """Read the command line, check it, plan, run the job; the features hook in
    (launch/seam.py)."""
    command = read_command_line(argv)  # the one reading of argv: every step below takes it
    # a usage error needs no `import torch` (seconds under load): the recorded torchrun table
    if features.see(command).checks_before_torch():
        usage.check_before_torch(command)
    adjusted = features.before_plan(command)
    if isinstance(adjusted, int):
        return adjusted
    launch = make_plan(adjusted, features)
    code = features.take_over(launch)
    if code is not None:
        return code
    start_lines.say(launch)
    env = dict(launch.env)  # the plan's, and the job's folder its processes report to
    folder = job_summary.start(env)  # the job's event stream (distrain/events/)
    notice = watch_notice.start(launch, folder)  # --watchdog on a script without init()
    os.environ.update(env)
    try:
        return _launch(launch, env, features, folder, notice)
    finally:  # idle now; what a feature started must not hold our stdout
        features.close()
        _end_lines(features, folder, notice)  # printed already when the job failed (_launch)


def _end_lines(
    features: Features, folder: str | None, notice: watch_notice.WatchNotice | None
) -> None:
    """The end-of-job lines from the job's event stream (once: the last call removes the
    folder), all before a failure's verdict: the features', the watchdog notice, then the step
    breakdown."""
    features.end_lines(folder)
    if notice is not None:
        notice.finish()  # reads the stream in the folder job_summary.finish removes
    job_summary.finish(folder)


def _launch(
    launch: LaunchPlan,
    env: dict[str, str],
    features: Features,
    job_dir: str | None = None,
    notice: watch_notice.WatchNotice | None = None,
) -> int:
    """Run the job; a failure's verdict is the last line, after the breakdown lines (if any)."""
    ended = _Ending(launch, features, job_dir, notice)
    if launch.args.launcher != "torchrun":
        return run_with_launcher(launch.args, env)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from distrain.launch.nodes.agent_store import AgentStore

    spec, rdzv = launch.agent_store, launch.rendezvous
    agent_store: AgentStore | None = None
    if spec is not None:
        # one node: the agent's store and rank 0's listen on loopback, not on every interface
        agent_store = AgentStore(spec.host, spec.port)
        os.environ.setdefault(BIND_ADDR, agent_store.address)
        rdzv = rdzv.on_port(agent_store.port)  # a free port is known once the store listens
    # torch's known noise off the console, one line of ours per restart (launch/report/console.py)
    console.install(job_dir, rdzv.max_nodes > 1)
    rendezvous.pass_endpoint(rdzv)
    # a static job's rank may stop this node (worker/lifecycle/stop_job.py)
    os.environ[LAUNCHER_PID] = str(os.getpid())
    # a static multi-node job: a rank on any node may stop every node (launch/nodes/stop_watch.py)
    watch = stop_watch.start(rdzv, job_dir)
    hold = store_hold.start(rdzv)  # a multi-node c10d job's store host: the others close through it
    succeeded = False
    try:
        try:
            agent.run(launch, rdzv, features.wrap)
        finally:  # before any end line: the watch signals this launcher no more (its stand_down)
            if watch is not None:
                watch.stand_down()
        succeeded = True
    except ChildFailedError as err:
        return ended.failed(err)
    except SignalException as err:  # the agent passed the signal on and waited for the workers
        return ended.signalled(err.sigval, watch.reason if watch is not None else None)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # rendezvous/store errors: one line, not torch's trace
        if isinstance(err, UsageError):
            raise  # said by main, after the end-of-job lines
        return ended.agent_error(err, rdzv)
    finally:
        if watch is not None:  # node 0: after the last line, until the other nodes read why
            watch.finish()
        if hold is not None:
            hold.finish(succeeded)
        if agent_store is not None:
            agent_store.close()
    return 0


class _Ending:
    """How a job that did not succeed ends: the end-of-job lines, then the verdict's line."""

    def __init__(
        self,
        launch: LaunchPlan,
        features: Features,
        job_dir: str | None,
        notice: watch_notice.WatchNotice | None,
    ) -> None:
        self.launch, self.features, self.job_dir, self.notice = launch, features, job_dir, notice

    def _say(self, line: str) -> None:
        print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    def _end_lines(self) -> None:
        _end_lines(self.features, self.job_dir, self.notice)

    def failed(self, err: BaseException) -> int:
        """A worker failed: its exit code, and the cause on the last line."""
        code, summary = _exit_code_of(err, self.job_dir)
        resume = console.resume_hint(self.job_dir)  # read before _end_lines removes the folder
        self._end_lines()
        tip = local_rank_hint.hint(self.launch.args, PROG)
        if tip:  # before the last line: that one keeps the cause
            print(tip, file=sys.stderr, flush=True)
        self._say(f"job failed: {summary}{resume}")
        return code

    def signalled(self, sigval: int, watched: str | None) -> int:
        """The agent passed a signal on and waited for the workers."""
        name = signal.Signals(sigval).name
        # why the job stopped for good: this node's watch saw it, or a rank of the node said it
        stopped = watched or job_summary.stop_reason(self.job_dir)
        resume = console.resume_hint(self.job_dir, every_node=stopped is not None)
        self._end_lines()
        if stopped:  # no checkpoint mark on this node: the rerun still resumes from the newest
            resume = (
                resume
                or "; rerun the same command on every node to resume from the newest checkpoint"
            )
            self._say(f"job stopped: {stopped}{resume}")
            return 1
        self._say(f"stopped by {name} (the workers were given it and have exited){resume}")
        return signal_exit_code(sigval)

    def agent_error(self, err: Exception, rdzv: rendezvous.Rendezvous) -> int:
        """The agent's own error (rendezvous, store): one line, not torch's trace."""
        if type(err).__name__ == "RendezvousClosedError":  # a rank's error would recur on restart
            self._end_lines()
            reason = rendezvous.stop_reason(rdzv) or "see the ranks' logs"
            why = "not restarted (a restart would fail the same way)"
            self._say(f"job failed, {why}: {reason}")
            rendezvous.wait_until_read(rdzv)
            return 1
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        self._end_lines()  # before the verdict: the last line names the cause (chaos)
        self._say(f"error: {type(err).__name__}: {first}")
        return 1
