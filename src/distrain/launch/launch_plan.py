"""The frozen plan of a `distrain run` (launch/plan.py makes it): what torch's agent is given.

torch's agent gets an ``argparse.Namespace`` built from the plan in one place
(:meth:`LaunchPlan.agent_args`); ``--dry-run`` prints the equivalent torchrun command
(:meth:`LaunchPlan.torchrun_command`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distrain.launch.agent import StartMethod
from distrain.launch.command_line import CommandLine, any_option
from distrain.launch.nodes.agent_store import StoreSpec
from distrain.launch.nodes.network import NetworkChoice
from distrain.launch.nodes.rendezvous import Rendezvous


class FrozenArgs(argparse.Namespace):
    """torchrun's and distrain's options after planning, read-only: the plan is final."""

    def __init__(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the launch plan is final: {name} cannot change")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"the launch plan is final: {name} cannot change")


@dataclass(frozen=True)
class LaunchPlan:
    """What `distrain run` decided, final: options, rendezvous, network, start method, env."""

    #: the options as resolved (processes per node, this node's address, rendezvous conf):
    #: what --dry-run's torchrun command shows
    args: FrozenArgs
    #: the command line, split once
    command: CommandLine
    #: the rendezvous the agent uses (torchrun's defaults and the loopback store applied)
    rendezvous: Rendezvous
    start: StartMethod
    #: the environment distrain adds for the workers
    env: Mapping[str, str]
    network: NetworkChoice | None = None
    #: the agent's store the launcher starts (one node), or None
    agent_store: StoreSpec | None = None
    #: what the features say when the job starts (--cpu: what stands in for what; a script
    #: that starts its own workers: what was seen)
    start_lines: tuple[str, ...] = ()

    def agent_args(self, rdzv: Rendezvous | None = None) -> argparse.Namespace:
        """torch's Namespace for ``config_from_args``: the one place it is built from the plan.

        `rdzv`: the plan's rendezvous once its store listens (Rendezvous.on_port).
        """
        r = rdzv or self.rendezvous
        values = dict(vars(self.args))
        for name in ("backend", "endpoint", "id", "conf"):
            values[f"rdzv_{name}"] = getattr(r, name)
        for name in ("nnodes", "node_rank", "master_addr", "master_port", "local_addr"):
            values[name] = getattr(r, name)
        values["standalone"] = r.standalone
        values["start_method"] = self.start.method
        # the forked workers run through torch's callable entrypoint: [script, *script args]
        values["run_path"] = self.args.run_path or self.start.method != "spawn"
        values["training_script_args"] = list(self.args.training_script_args)
        return argparse.Namespace(**values)

    def torchrun_command(self) -> list[str]:
        """The equivalent `torchrun` command line."""
        a = self.args
        cmd = ["torchrun", "--nnodes", str(a.nnodes), "--nproc-per-node", str(a.nproc_per_node)]
        if a.rdzv_backend != "static" or a.rdzv_endpoint:
            cmd += [
                "--rdzv-backend",
                a.rdzv_backend,
                "--rdzv-endpoint",
                a.rdzv_endpoint,
                "--rdzv-id",
                a.rdzv_id,
            ]
            if a.rdzv_conf:
                cmd += ["--rdzv-conf", a.rdzv_conf]
        else:
            cmd += ["--node-rank", str(a.node_rank), "--master-addr", a.master_addr]
            if a.master_port is not None:
                cmd += ["--master-port", str(a.master_port)]
        if a.standalone:
            cmd.append("--standalone")
        if int(a.max_restarts):
            cmd += ["--max-restarts", str(a.max_restarts)]
        if a.log_dir:
            cmd += ["--log-dir", a.log_dir]
        if a.local_addr:
            cmd += ["--local-addr", a.local_addr]
        if a.module:
            cmd.append("-m")
        if a.no_python:
            cmd.append("--no-python")
        cmd.append(a.training_script)
        # torchrun itself needs "--" to stop prefix-matching script options
        script_args = list(a.training_script_args)
        if any_option(script_args):
            cmd.append("--")
        return cmd + script_args
