"""The core launcher: torch's own ``run()``, which is ``config_from_args`` → ``elastic_launch``.

``torch.distributed.run.run(args)`` cannot be called with a callable entrypoint, so its two
steps are taken here: the plan's options (:func:`agent_args`, torch's rendezvous defaults already
applied) become torch's ``LaunchConfig`` and entrypoint, the features wrap the :class:`Agent`
(another entrypoint, another start method: launch/seam.py), and torch's elastic agent runs it.
Nothing here names a feature: a ``--start-method spawn`` job runs torchrun's own path.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distrain.launch.launch_plan import LaunchPlan, StartMethod
from distrain.launch.nodes import store_port
from distrain.launch.nodes.rendezvous import Rendezvous
from distrain.settings import boot_first

PROG = "distrain run"


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
            # sitecustomize), so the last line names the cause as in a forked worker
            boot_first(os.environ)
        elastic_launch(config=self.config, entrypoint=self.entrypoint)(*self.args)


def agent_args(launch: LaunchPlan, rdzv: Rendezvous | None = None) -> argparse.Namespace:
    """torch's Namespace for ``config_from_args``: the one place it is built from the plan.

    `rdzv`: the plan's rendezvous once its store listens (Rendezvous.on_port).
    """
    r = rdzv or launch.rendezvous
    values = dict(vars(launch.args))
    for name in ("backend", "endpoint", "id", "conf"):
        values[f"rdzv_{name}"] = getattr(r, name)
    for name in ("nnodes", "node_rank", "master_addr", "master_port", "local_addr"):
        values[name] = getattr(r, name)
    values["standalone"] = r.standalone
    values["start_method"] = launch.start.method
    # a callable entrypoint (a forked worker) is given [script, *script args]
    values["run_path"] = launch.args.run_path or launch.start.method != "spawn"
    values["training_script_args"] = list(launch.args.training_script_args)
    return argparse.Namespace(**values)


def run(launch: LaunchPlan, rdzv: Rendezvous, wrap: Callable[[Agent], Agent] = lambda a: a) -> None:
    """Run torch's elastic agent as `launch` plans it, with the rendezvous `rdzv`, as the
    features `wrap` it (launch/seam.py Features.wrap)."""
    import torch.multiprocessing
    from torch.distributed import run as torchrun

    start, args = launch.start, agent_args(launch, rdzv)
    if start.note:
        print(f"{PROG}: {start.note}", file=sys.stderr, flush=True)
    torch.multiprocessing._set_thread_name("pt_elastic")
    config, entrypoint, cmd_args = torchrun.config_from_args(args)
    store_port.install()  # rank 0's store port is held from its choice to its bind
    try:
        wrap(Agent(config, entrypoint, tuple(cmd_args), start, args)).launch()
    finally:
        store_port.release()
