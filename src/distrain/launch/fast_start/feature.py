"""The fast start behind the launcher's seam (launch/seam.py): its server, its start, its agent.

- before the plan: the fork server is forked now when the command line forks its workers
  (:func:`~distrain.launch.fast_start.forkserver.early_start`), so its preload overlaps the
  launcher's planning;
- the plan: ``--start-method fast`` resolved (:func:`~distrain.launch.fast_start.forkserver.
  choose_start`);
- the agent: a worker forked from the warm server runs the script
  (:func:`distrain.worker.fast_start.forked.run_script`, named by a
  :class:`~distrain.contract.WorkerEntrypoint`), with torch's start method ``forkserver`` (or
  ``fork``); the agent's rendezvous, restarts, environment, logs and error files are torch's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass

from distrain import noise
from distrain.contract import FORKED_WORKER, ForkJob, WorkerEntrypoint
from distrain.launch.agent import Agent
from distrain.launch.command_line import CommandLine
from distrain.launch.fast_start import forkserver
from distrain.launch.fast_start.worker_groups import stop_whole_groups
from distrain.launch.seam import Draft, Feature
from distrain.process.lineage import ignored_signals


class FastStart(Feature):
    """``--start-method fast`` (the default), ``forkserver`` and ``fork``."""

    def before_plan(self, command: CommandLine) -> CommandLine:
        """Fork the server now when `command` forks its workers (its preload overlaps ours)."""
        forkserver.early_start(command)
        return command

    def adjust(self, draft: Draft) -> None:
        """The start method ``--start-method`` asks for, resolved."""
        draft.start = forkserver.choose_start(draft.parsed)

    def wrap(self, agent: Agent) -> Agent:
        """Workers forked from the server (or the launcher, for ``fork``)."""
        if agent.start.method == "spawn":
            return agent
        return ForkedAgent(**{f.name: getattr(agent, f.name) for f in dataclasses.fields(agent)})

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        """Stop the server: idle now, and it must not hold the launcher's stdout.  Once: its
        pid, reaped, may be another process's by a second call."""
        if not self.closed:
            self.closed = True
            forkserver.stop_server()


@dataclass(frozen=True)
class ForkedAgent(Agent):
    """The agent whose workers are forked: each runs the script with ``runpy.run_path``."""

    def launch(self) -> None:
        """Run the agent with the forked workers' entrypoint."""
        from torch.distributed.launcher.api import elastic_launch

        script, *script_args = self.args
        if self.start.method != "fork":  # no-op when early_start() already did it
            forkserver.start_server(script, self.options.self_starting)
        env = dict(os.environ)
        env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = self.config.signals_to_handle
        fallback_dir = (
            tempfile.mkdtemp(prefix="distrain-fastboot-") if self.start.fallback else None
        )
        imports = forkserver.top_level_imports(script)
        # the script path as given, like torchrun's argv: the worker's cwd is the launcher's
        job = ForkJob(
            script,
            env,
            fallback_dir,
            any(n.split(".")[0] == "distrain" for n in imports),
            ignored_signals(),  # what an exec'd worker inherits ignored (a background job's SIGINT)
        )
        logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
            _QuietWorkerExit()
        )
        stop_whole_groups()  # a worker's own children end with it, as under torchrun
        try:
            entrypoint = WorkerEntrypoint(FORKED_WORKER, "run_script")
            elastic_launch(config=self.config, entrypoint=entrypoint)(job, *script_args)
        finally:
            if fallback_dir:
                shutil.rmtree(fallback_dir, ignore_errors=True)


def feature(name: str) -> Feature:
    """The fast start's hooks (launch/seam.py)."""
    return FastStart()


class _QuietWorkerExit(logging.Filter):
    """Drop the agent's report of a failed forked worker: its line and its traceback.

    The worker already printed its own traceback (as a fresh interpreter would); the agent's
    second one only shows torch.multiprocessing internals, and `distrain run`'s last line names
    the failed rank, its exit code and the cause.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # "failed (exitcode: 1) local_rank: …": `distrain run` names the failed rank and its cause
        # on its own last line (and a restart in its own line: launch/report/console.py); at
        # DISTRAIN_LOG_LEVEL=debug torch's record stays, without the traceback of internals
        if str(record.msg).startswith("failed (exitcode") and noise.verbose():
            record.exc_info, record.exc_text = None, None
            return True
        if str(record.msg).startswith("failed (exitcode"):
            # a worker killed by a signal printed nothing itself: keep torch's line (not its
            # traceback of torch.multiprocessing internals) for that one
            record.exc_info, record.exc_text = None, None
            code = record.args[0] if isinstance(record.args, tuple) and record.args else 0
            return isinstance(code, int) and code < 0
        if record.exc_info:
            # torch's log formatter imports torch._dynamo (~1 s) to format any exception: in the
            # agent that import sat between a worker's death and the restart.  Formatted here,
            # the text is the same and nothing is imported.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return True
