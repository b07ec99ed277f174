"""The core launcher: torch's own ``run()``, which is ``config_from_args`` → ``elastic_launch``.

``torch.distributed.run.run(args)`` cannot be called with a callable entrypoint, so its two
steps are taken here: the plan's options (LaunchPlan.agent_args, torch's rendezvous defaults
already applied) become torch's ``LaunchConfig`` and entrypoint, the features wrap the
:class:`Agent` (the fast start hands it a callable that runs in a worker forked from its server;
the replica groups report their lost workers), and torch's elastic agent runs it.  Nothing here
names a feature: a ``--start-method spawn`` job runs torchrun's own path.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distrain.launch.nodes import store_port
from distrain.settings import boot_first

PROG = "distrain run"


@dataclass(frozen=True)
class StartMethod:
    """How the agent starts the workers (decided by the plan)."""

    #: torch's start method: "spawn" (fresh interpreters), "forkserver" or "fork"
    method: str
    #: the fast start: a worker whose script fails before its process group reruns fresh
    fallback: bool = False
    #: why a fast start runs fresh interpreters instead (said when the job starts)
    note: str = ""


@dataclass(frozen=True)
class Agent:
    """What torch's elastic agent is handed: its config, the entrypoint and its arguments."""

    #: torch's LaunchConfig
    config: Any
    #: the program (a path) or a callable, as ``config_from_args`` gives it
    entrypoint: Any
    args: tuple[Any, ...]
    start: StartMethod
    #: the launcher's options the agent was configured from
    options: argparse.Namespace

    def launch(self) -> None:
        """Run the agent to the end (torch raises ChildFailedError & co. on a failure)."""
        from torch.distributed.launcher.api import elastic_launch

        if self.start.method == "spawn":
            # a plain script's uncaught exception reaches the error file (the boot
            # sitecustomize), so the last line names the cause as with the fast start
            boot_first(os.environ)
        elastic_launch(config=self.config, entrypoint=self.entrypoint)(*self.args)


def run(
    args: argparse.Namespace, start: StartMethod, wrap: Callable[[Agent], Agent] = lambda a: a
) -> None:
    """Run torch's elastic agent with `args` (LaunchPlan.agent_args), as the features `wrap`
    it (launch/seam.py Features.wrap)."""
    import torch.multiprocessing
    from torch.distributed import run as torchrun

    if start.note:
        print(f"{PROG}: {start.note}", file=sys.stderr, flush=True)
    torch.multiprocessing._set_thread_name("pt_elastic")
    config, entrypoint, cmd_args = torchrun.config_from_args(args)
    store_port.install()  # rank 0's store port is held from its choice to its bind
    try:
        wrap(Agent(config, entrypoint, tuple(cmd_args), start, args)).launch()
    finally:
        store_port.release()
