"""The frozen plan of a `distrain run` (launch/plan.py makes it): what torch's agent is given.

torch's agent gets an ``argparse.Namespace`` built from the plan in one place
(launch/agent.py ``agent_args``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distrain.launch.command_line import CommandLine
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
class StartMethod:
    """How the agent starts the workers (decided by the plan)."""

    #: torch's start method: "spawn" (fresh interpreters), "forkserver" or "fork"
    method: str
    #: a worker whose script fails before its process group reruns in a fresh interpreter
    fallback: bool = False
    #: why the workers run in fresh interpreters instead of the start asked for (said when
    #: the job starts)
    note: str = ""


@dataclass(frozen=True)
class LaunchPlan:
    """What `distrain run` decided, final: options, rendezvous, network, start method, env."""

    #: the options as resolved (processes per node, this node's address, rendezvous conf)
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
    #: what the features say when the job starts (launch/seam.py Draft.lines)
    start_lines: tuple[str, ...] = ()
